"""The Data screen: the data check's report (cockpit data) on screen."""
