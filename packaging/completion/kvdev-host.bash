# bash completion for kvdev-host(1): commands, each command's options, and files or
# directories for the options that take them (-f also takes - for standard input).
# Install as /usr/share/bash-completion/completions/kvdev-host.

_kvdev_host()
{
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local commands="allocate schedule prepare update unprepare status bundle serve controller guests relay"
    local command="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        [[ ${COMP_WORDS[i]} != -* ]] && { command=${COMP_WORDS[i]}; break; }
    done

    case $prev in
        -f|--filename|--network-data|--events|--domain-xml|--guest-plan|--kubeconfig)
            COMPREPLY=($(compgen -f -- "$cur"))
            return ;;
        --plugin-data-dir|--cdi-dir|--host-dir|--registry-dir|--claims-dir|--from-tree|--from-cdi|--out)
            COMPREPLY=($(compgen -d -- "$cur"))
            return ;;
        -o|--output)
            case $command in
                prepare|update|unprepare|bundle|guests) COMPREPLY=($(compgen -W "text json" -- "$cur")) ;;
                *) COMPREPLY=($(compgen -W "yaml json name" -- "$cur")) ;;
            esac
            return ;;
        --log-level)
            COMPREPLY=($(compgen -W "debug info warning error" -- "$cur"))
            return ;;
        --log-format)
            COMPREPLY=($(compgen -W "text json" -- "$cur"))
            return ;;
        --kube-api-qps|--kube-api-burst)
            return ;;
        --node|--driver|--feature-gates|--filter-timeout|--claim-uid|--node-name|--grace|\
        --health-port|--metrics-address|\
        --lease-namespace|--lease-name|--identity|--resync|--guest-grace|-n|--namespace)
            return ;;
    esac

    local words
    case $command in
        "") words="--help --version $commands" ;;
        allocate) words="-f --filename --node -o --output --json --explain --feature-gates
                         --filter-timeout" ;;
        schedule) words="-f --filename -o --output --json --summary-only --feature-gates
                         --no-selector-cache --filter-timeout --events --no-hints --compare
                         --progress" ;;
        prepare|update) words="-f --filename --driver --plugin-data-dir --cdi-dir --network-data
                               -o --output --json" ;;
        unprepare) words="-f --filename --driver --plugin-data-dir --cdi-dir -o --output --json" ;;
        status) words="-f --filename --driver --network-data -o --output --json" ;;
        bundle) words="--from-tree --from-cdi --claim-uid --host-dir --domain-xml --guest-plan --out
                       -o --output --json" ;;
        serve) words="--driver --plugin-data-dir --cdi-dir --registry-dir --claims-dir --kube
                      --kubeconfig --node-name --pod-uid --grace --health-port
                      --metrics-address --log-level" ;;
        controller) words="--once -f --filename -o --output --json --kubeconfig --leader-elect
                           --no-leader-elect --lease-namespace --lease-name --identity --resync
                           --lease-duration --renew-deadline --retry-period --http-address
                           --relay-namespace --workers --guest-grace --log-level" ;;
        guests) words="-n --namespace --kubeconfig -f --filename -o --output" ;;
        relay) words="--once --node-name --cdi-dir --host-dir --namespace --interval --kubeconfig
                      -o --output --json" ;;
        *) return ;;
    esac
    # every command: --log-format --log-level; those that talk to the API server: the rate limit
    [[ $command == serve || $command == controller || $command == relay || $command == guests ]] &&
        words="$words --kube-api-qps --kube-api-burst"
    COMPREPLY=($(compgen -W "$words --log-format --log-level --help" -- "$cur"))
}

complete -F _kvdev_host kvdev-host
