# bash completion for kvdev-agent(8): its options, and files or directories for those that
# take them. Install as /usr/share/bash-completion/completions/kvdev-agent.

_kvdev_agent()
{
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    case $prev in
        --config|--hints|--config-drive|--socket)
            COMPREPLY=($(compgen -f -- "$cur"))
            return ;;
        --metadata-root|--state-dir|--link-dir|--config-root)
            COMPREPLY=($(compgen -d -- "$cur"))
            return ;;
        --log-level)
            COMPREPLY=($(compgen -W "debug info warning error" -- "$cur"))
            return ;;
        --poll-interval)
            COMPREPLY=($(compgen -W "auto 0 2" -- "$cur"))
            return ;;
        --read-deadline)
            COMPREPLY=($(compgen -W "5 15 60" -- "$cur"))
            return ;;
        --match-kind)
            COMPREPLY=($(compgen -W "veth dummy" -- "$cur"))
            return ;;
    esac
    COMPREPLY=($(compgen -W "--help --version --config --metadata-root --hints --config-drive
        --socket --state-dir --link-dir --config-root --no-altnames --match-kind --log-level
        --poll-interval --read-deadline --once --dry-run --json --dump-config" -- "$cur"))
}

complete -F _kvdev_agent kvdev-agent
