from neuronbuild.cli import main

main()
