from agents.cli import main

main()
