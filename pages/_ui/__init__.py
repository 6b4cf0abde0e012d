"""The pages' shared helpers, one package: session-state keys (keys), the page shell and its one error
guard (shell), the sidebar (sidebar), the current model / dataset / document (current), IG on a page (ig), head
importance (importance), which pages import directly; the "compute for the dataset" flow (dataset), state
that follows the document (state), definition captions (labels), the attribution overlay's pieces (overlay), hosted mode (hosting), the login gate (login),
shareable links (links) and downloads (export). A page file arranges widgets and calls these and the core."""
