from cockpit.cli import main

raise SystemExit(main())
