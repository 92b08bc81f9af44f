"""The operator console (`/ui/`) and the offline API docs (`/docs`): static files
shipped in the package, served by the API app. See docs/console.md."""

from timer_service.ui.mount import install_console, install_docs

__all__ = ["install_console", "install_docs"]
