from cpuspec.cli.main import main

main()
