from verifiers_stepwise.hosts.trl.cli import main

main()
