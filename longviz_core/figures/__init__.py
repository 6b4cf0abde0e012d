"""Figures built from the core's results: HTML overlays and Altair charts. No Streamlit here."""
