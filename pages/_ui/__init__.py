"""The pages' shared helpers, one package: session-state keys (keys), the sidebar, accessors and the one error
guard (common), the "compute for the dataset" flow (dataset), state that follows the document (state),
definition captions (labels), the attribution overlay's pieces (overlay), hosted mode and login (hosting),
shareable links (links) and downloads (export). A page file arranges widgets and calls these and the core."""
