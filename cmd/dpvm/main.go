// Command dpvm runs and controls dpvm virtual machines, with the example
// programs (examples, examples/npb) registered.
//
// See the README at the repository's root for a tour; every command has
// --help. A user's own module builds the same command with its programs
// registered by calling cli.Main (package github.com/dpvm/dpvm/cmd/cli).
package main

import "github.com/dpvm/dpvm/cmd/cli"

func main() { cli.Main() }
