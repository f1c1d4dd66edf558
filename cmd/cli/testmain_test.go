package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain runs the test binary as dpvm itself when it is started by that
// name (through a link named dpvm), so that a test can run shell commands
// that call dpvm; otherwise it runs the tests.
func TestMain(m *testing.M) {
	if filepath.Base(os.Args[0]) == "dpvm" {
		Main()
	}
	os.Exit(m.Run())
}
