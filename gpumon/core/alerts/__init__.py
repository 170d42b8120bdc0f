"""Alerts sent to the user's channels (config.toml ``[alerts]``): a webhook, a command, desktop notices.

``settings.py`` reads and checks the table, ``channels.py`` sends one alert once, ``delivery.py`` sends off the
caller's thread with retries and records every attempt, ``history.py`` reads the attempts back (``gpumon
alerts``, the Alerts view). ``gpumon.core.runs.supervision.alerts.raise_alert`` is the one way in.
"""
