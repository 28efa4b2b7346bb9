//! opfs: reversible workspaces for AI coding agents.
#![deny(missing_docs)]
