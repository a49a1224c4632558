from staticadm.launch import main

raise SystemExit(main())
