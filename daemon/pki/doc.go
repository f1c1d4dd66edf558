// Package pki holds a virtual machine's credentials: the cluster CA the
// operator keeps, the role-bound certificates issued under it (a host
// certificate per daemon, a user certificate per person), the mutual-TLS
// configurations built from them, and the cluster secret that
// authenticates checkpoints and job manifests.
//
// A certificate's first organizational unit is its holder's role
// (RoleDaemon, RoleAdmin, RoleUser) and its common name the holder's
// name; the master's host certificate carries a second unit, "master".
// A credential file holds the leaf certificate, the CA certificate and the
// leaf's private key, never the CA's key. The cluster secret (a Keyring)
// is separate from the CA: only daemons hold it, and each of its keys has
// an identifier, so it can be rotated while checkpoints written under an
// older key still verify. README.md beside this file describes the files,
// the commands and the threat model.
package pki
