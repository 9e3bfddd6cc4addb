from neuronbuild.cli.main import main

main()
