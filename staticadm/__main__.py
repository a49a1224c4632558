from staticadm.cli import main

raise SystemExit(main())
