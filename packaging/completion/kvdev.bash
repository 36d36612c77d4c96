# bash completion for kvdev(1): commands, options, and for `explain` the devices the agent
# describes (refs and interface names, read from `kvdev devices`).
# Install as /usr/share/bash-completion/completions/kvdev.

_kvdev_devices()
{
    # The first (DEVICE) and third (INTERFACE) columns of the table; quiet when no agent.
    kvdev "$@" devices --color never 2>/dev/null |
        awk 'NR > 1 { print $1; if ($3 != "-") print $3 }'
}

_kvdev()
{
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local global="--socket -o --output --json --color --timeout --help"
    local commands="status devices explain plan wait reconcile metrics collect metadata"
    local command="" sub="" socket=() i word

    # Find the command (and metadata's subcommand), skipping options and their values.
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        case $word in
            --socket) socket=(--socket "${COMP_WORDS[i+1]}"); ((i++)); continue ;;
            -o|--output|--color|--timeout|--for|--tarfile|--metadata-root|--state-dir) ((i++)); continue ;;
            -*) continue ;;
        esac
        if [[ -z $command ]]; then
            command=$word
        elif [[ $command == metadata && -z $sub ]]; then
            sub=$word
        fi
    done

    case $prev in
        --socket)
            COMPREPLY=($(compgen -f -- "$cur"))
            return ;;
        --color)
            COMPREPLY=($(compgen -W "auto always never" -- "$cur"))
            return ;;
        --for)
            COMPREPLY=($(compgen -W "converged ready" -- "$cur"))
            return ;;
        -o|--output)
            COMPREPLY=($(compgen -W "json yaml wide name" -- "$cur"))
            return ;;
        --timeout)
            return ;;
    esac

    local words=""
    case $command in
        "")
            words="$global --version $commands" ;;
        status|devices|plan|reconcile|metrics)
            words=$global ;;
        explain)
            if [[ $cur == -* ]]; then
                words=$global
            else
                local IFS=$'\n'
                COMPREPLY=($(compgen -W "$(_kvdev_devices "${socket[@]}")" -- "$cur"))
                return
            fi ;;
        collect)
            case $prev in
                --tarfile) COMPREPLY=($(compgen -f -- "$cur")); return ;;
                --metadata-root|--state-dir) COMPREPLY=($(compgen -d -- "$cur")); return ;;
            esac
            words="$global --tarfile --metadata-root --state-dir --with-metadata" ;;
        wait)
            words="--for --timeout --socket -o --output --json --color --help" ;;
        metadata)
            if [[ -z $sub ]]; then
                words="validate --help"
            elif [[ $cur == -* ]]; then
                words="--json -o --output --verbose -v --color --help"
            else
                COMPREPLY=($(compgen -f -- "$cur"))
                return
            fi ;;
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}

complete -F _kvdev kvdev
