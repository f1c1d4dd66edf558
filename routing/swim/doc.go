// Package swim is host-to-host failure detection, SWIM with Lifeguard's
// refinements, as pure machines: a Node per host and a Referee at the
// master.
package swim
