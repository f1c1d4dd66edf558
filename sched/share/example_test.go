package share_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/dpvm/dpvm/sched/share"
)

// A daemon placing a new task submitted on a busy host.
func ExamplePlacer() {
	hosts := []share.Host{
		{Name: "h1", Speed: 1, Cores: 2, Tasks: 5}, // the origin: a sender
		{Name: "h2", Speed: 1, Cores: 2, Tasks: 4},
		{Name: "h3", Speed: 2, Cores: 4, Tasks: 1},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range []string{"local", "si", "ri", "index"} {
		p, err := share.New(name)
		if err != nil {
			panic(err)
		}
		d, err := p.Place(0, hosts, rng)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-5s -> %s\n", name, hosts[d.Host].Name)
	}
	// Output:
	// local -> h1
	// si    -> h3
	// ri    -> h3
	// index -> h3
}
