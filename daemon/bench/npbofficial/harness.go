package npbofficial

import (
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
)

// script is the harness the dpvm binary carries, so that `dpvm bench
// npb-official` runs anywhere.
//
//go:embed run.sh
var script []byte

// ScriptName is the harness script's name.
const ScriptName = "run.sh"

// WriteScript writes the embedded harness script, executable, into dir
// (made if missing) and returns its path.
func WriteScript(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("npbofficial: %w", err)
	}
	p := filepath.Join(dir, ScriptName)
	if err := os.WriteFile(p, script, 0o755); err != nil {
		return "", fmt.Errorf("npbofficial: write the harness: %w", err)
	}
	return p, nil
}
