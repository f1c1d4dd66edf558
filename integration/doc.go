// Package integration holds tests that build the dpvm command and run it as
// real processes talking over loopback, and the peer comparisons with PVM
// 3.4 and Open MPI. Its tests are part of `go test ./...`.
package integration
