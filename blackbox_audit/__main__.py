from blackbox_audit.cli import main

raise SystemExit(main())
