package examples

import (
	"bytes"
	"os"
	"testing"
)

// TestReadmeWalkthrough keeps the README's example program identical to
// examples/squares.go, which the test above runs.
func TestReadmeWalkthrough(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("squares.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, append([]byte("```go\n"), src...)) {
		t.Error("README.md's walk-through differs from examples/squares.go; copy the file into the README")
	}
}
