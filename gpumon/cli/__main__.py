from gpumon.cli import main

raise SystemExit(main())
