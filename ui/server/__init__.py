"""The API server and sharing this computer: their panels, settings and on/off switches."""
