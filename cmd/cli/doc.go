// Package cli is the dpvm command line: every command of the dpvm binary
// (daemon, run, conf, ps, spawn, migrate, checkpoint, npb, bench, …) as
// one importable package.
//
// A program written against package task runs on a virtual machine whose
// every daemon knows its task types, so a user's module builds its own
// dpvm binary that holds them:
//
//	package main
//
//	import (
//		"github.com/dpvm/dpvm/cmd/cli"
//
//		_ "example.com/mysolver/tasks" // registers the program's task types
//	)
//
//	func main() { cli.Main() }
//
// Every daemon of a virtual machine must run the same build: the master
// refuses a host whose version or registry of task types differs.
package cli
