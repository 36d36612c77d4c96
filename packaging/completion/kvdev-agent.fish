# fish completion for kvdev-agent(8). Install as
# /usr/share/fish/vendor_completions.d/kvdev-agent.fish.

complete -c kvdev-agent -f
complete -c kvdev-agent -s h -l help -d "help, defaults and exit codes"
complete -c kvdev-agent -l version -d "the version"
complete -c kvdev-agent -l config -r -F -d "config file"
complete -c kvdev-agent -l metadata-root -x -a "(__fish_complete_directories)" -d "metadata tree"
complete -c kvdev-agent -l hints -r -F -d "guest hints file"
complete -c kvdev-agent -l config-drive -r -F -d "a config drive's meta_data.json"
complete -c kvdev-agent -l socket -r -F -d "local API socket"
complete -c kvdev-agent -l state-dir -x -a "(__fish_complete_directories)" -d "state directory"
complete -c kvdev-agent -l link-dir -x -a "(__fish_complete_directories)" -d "where link wishes go"
complete -c kvdev-agent -l config-root -x -a "(__fish_complete_directories)" -d "where the guest network configuration is read"
complete -c kvdev-agent -l no-altnames -d "do not add altnames"
complete -c kvdev-agent -l match-kind -x -a "veth dummy" -d "also match software links of this kind"
complete -c kvdev-agent -l log-level -x -a "debug info warning error" -d "log level"
complete -c kvdev-agent -l poll-interval -x -a "auto 0 2" -d "poll the metadata files every SECONDS"
complete -c kvdev-agent -l read-deadline -x -a "5 15 60" -d "seconds a pass waits for its read of the metadata"
complete -c kvdev-agent -l once -d "converge once, print the status, exit"
complete -c kvdev-agent -l dry-run -d "plan and report; change and write nothing"
complete -c kvdev-agent -l json -d "with --once: the status as JSON"
complete -c kvdev-agent -l dump-config -d "the effective configuration and where each value came from"
