package peers

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// harness is the peer harness the dpvm binary carries: run.sh and the C
// programs it builds (csrc), so that `dpvm bench peers` runs anywhere.
//
//go:embed run.sh csrc/*.c csrc/*.h
var harness embed.FS

// ScriptName is the harness script's name, in its directory.
const ScriptName = "run.sh"

// WriteHarness writes the embedded harness into dir (made if missing):
// run.sh, executable, with the C sources in csrc beside it, where the
// script looks for them. It returns the script's path.
func WriteHarness(dir string) (string, error) {
	err := fs.WalkDir(harness, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := harness.ReadFile(path)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if path == ScriptName {
			mode = 0o755
		}
		return os.WriteFile(dst, b, mode)
	})
	if err != nil {
		return "", fmt.Errorf("peers: write the harness into %s: %w", dir, err)
	}
	return filepath.Join(dir, ScriptName), nil
}
