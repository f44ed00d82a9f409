"""The main window: its layout, arranging every feature's panels, its side tabs and help
dialogs. It renders; the controllers (ui.chat and each feature's) decide."""
