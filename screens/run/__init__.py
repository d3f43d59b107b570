"""The run screen: the app that follows one run, its view, figures and telemetry feed."""
