import sys

from neuronbuild.demo.flow import main

sys.exit(main())
