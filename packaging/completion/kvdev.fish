# fish completion for kvdev(1). Install as /usr/share/fish/vendor_completions.d/kvdev.fish.

set -l commands status devices explain plan wait reconcile metrics collect metadata
complete -c kvdev -f
complete -c kvdev -n "not __fish_seen_subcommand_from $commands" -a status -d "converged? counts by phase, errors, claims"
complete -c kvdev -n "not __fish_seen_subcommand_from $commands" -a devices -d "the described devices and their guest interfaces"
complete -c kvdev -n "not __fish_seen_subcommand_from $commands" -a explain -d "why one device matched or did not"
complete -c kvdev -n "not __fish_seen_subcommand_from $commands" -a plan -d "the steps a pass would apply now"
complete -c kvdev -n "not __fish_seen_subcommand_from $commands" -a wait -d "wait until converged or ready"
complete -c kvdev -n "not __fish_seen_subcommand_from $commands" -a reconcile -d "a full pass now (root only)"
complete -c kvdev -n "not __fish_seen_subcommand_from $commands" -a metrics -d "the agent's counters, Prometheus text"
complete -c kvdev -n "not __fish_seen_subcommand_from $commands" -a collect -d "one support tarball"
complete -c kvdev -n "__fish_seen_subcommand_from collect" -l tarfile -r -F -d "where to write it"
complete -c kvdev -n "__fish_seen_subcommand_from collect" -l metadata-root -x -a "(__fish_complete_directories)" -d "the metadata tree to list"
complete -c kvdev -n "__fish_seen_subcommand_from collect" -l state-dir -x -a "(__fish_complete_directories)" -d "the state directory"
complete -c kvdev -n "__fish_seen_subcommand_from collect" -l with-metadata -d "also the metadata files' contents"
complete -c kvdev -n "not __fish_seen_subcommand_from $commands" -a metadata -d "DRA device metadata files, offline"
complete -c kvdev -n "__fish_seen_subcommand_from metadata; and not __fish_seen_subcommand_from validate" -a validate -d "check metadata files"
complete -c kvdev -n "__fish_seen_subcommand_from validate" -F
complete -c kvdev -n "__fish_seen_subcommand_from validate" -s v -l verbose -d "also list ignored files"
complete -c kvdev -n "__fish_seen_subcommand_from explain" -a "(kvdev devices -o name 2>/dev/null)" -d "described device"
complete -c kvdev -l socket -r -F -d "the agent's socket"
complete -c kvdev -s o -l output -x -a "json yaml wide name" -d "output format"
complete -c kvdev -l json -d "the same as -o json"
complete -c kvdev -l color -x -a "auto always never" -d "colour"
complete -c kvdev -l timeout -x -d "seconds to wait for each answer"
complete -c kvdev -n "__fish_seen_subcommand_from wait" -l for -x -a "converged ready" -d "what to wait for"
complete -c kvdev -s h -l help -d "help, examples and exit codes"
complete -c kvdev -l version -d "the version"
