"""The card picker: its app, the screen, the settings form and the save dialog."""
