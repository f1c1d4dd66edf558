package cli

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// deployDir holds the service files checked here.
const deployDir = "../dpvm/deploy"

// readINI reads a systemd unit: its sections' keys and values.
func readINI(t *testing.T, file string) map[string]map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ini := map[string]map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			ini[section] = map[string]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %q", file, n, line)
			}
			ini[section][strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return ini
}

// readEnvFile reads KEY=VALUE lines.
func readEnvFile(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not KEY=VALUE", file, line)
		}
		env[k] = v
	}
	return env
}

var envRef = regexp.MustCompile(`\$\{([A-Z_]+)\}`)

func TestSystemdUnits(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, unit := range []string{"dpvm-master.service", "dpvm-host.service"} {
		t.Run(unit, func(t *testing.T) {
			file := filepath.Join(deployDir, "systemd", unit)
			ini := readINI(t, file)
			svc := ini["Service"]
			if svc == nil || ini["Unit"] == nil || ini["Install"] == nil {
				t.Fatalf("%s: want [Unit], [Service] and [Install]", file)
			}
			words := strings.Fields(svc["ExecStart"])
			if len(words) < 2 || !filepath.IsAbs(words[0]) || filepath.Base(words[0]) != "dpvm" {
				t.Fatalf("ExecStart %q: want an absolute path to dpvm", svc["ExecStart"])
			}
			if err := checkCommandLine(app, append([]string{"dpvm"}, words[1:]...)); err != nil || words[1] != "daemon" {
				t.Fatalf("ExecStart %q: %v (want dpvm daemon)", words, err)
			}
			master := strings.Contains(unit, "master")
			if slices.Contains(words, "--master") != master || slices.Contains(words, "--join") == master {
				t.Errorf("ExecStart %q: the master unit starts --master, the host unit --join", words)
			}
			// The environment file is shipped beside the unit and defines
			// every variable ExecStart uses.
			envFile := svc["EnvironmentFile"]
			env := readEnvFile(t, filepath.Join(deployDir, "systemd", filepath.Base(envFile)))
			for _, m := range envRef.FindAllStringSubmatch(svc["ExecStart"], -1) {
				if _, ok := env[m[1]]; !ok {
					t.Errorf("ExecStart uses ${%s}, which %s does not set", m[1], envFile)
				}
			}
			// A daemon that 'dpvm halt' or systemctl stop ended exits 0
			// and stays down; one that lost its master exits 1 and is
			// started again.
			if svc["Restart"] != "on-failure" {
				t.Errorf("Restart=%s: want on-failure (Restart=always cycles after dpvm halt)", svc["Restart"])
			}
			systemdVerify(t, file, words[0], envFile)
		})
	}
}

// systemdVerify runs systemd-analyze verify on a copy of the unit whose
// binary and environment file are ones that exist here.
func systemdVerify(t *testing.T, file, bin, envFile string) {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze: the unit is only parsed")
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env, _ := filepath.Abs(filepath.Join(deployDir, "systemd", filepath.Base(envFile)))
	b = bytes.ReplaceAll(b, []byte("ExecStart="+bin), []byte("ExecStart="+self))
	b = bytes.ReplaceAll(b, []byte("EnvironmentFile="+envFile), []byte("EnvironmentFile="+env))
	copyUnit := filepath.Join(dir, filepath.Base(file))
	if err := os.WriteFile(copyUnit, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// verify exits 0 on some errors it ignores, so its complaints about
	// the unit count too.
	out, err := exec.Command(sa, "verify", "--man=no", copyUnit).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte(copyUnit)) {
		t.Errorf("systemd-analyze verify %s: %v\n%s", file, err, out)
	}
}

func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func TestSlurmScript(t *testing.T) {
	file := filepath.Join(deployDir, "slurm", "dpvm.sbatch")
	if bash, err := exec.LookPath("bash"); err == nil {
		if out, err := exec.Command(bash, "-n", file).CombinedOutput(); err != nil {
			t.Fatalf("bash -n %s: %v\n%s", file, err, out)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	// One daemon per node, with the node's CPUs it reports; requeued
	// rather than lost; the output of every run in one file; SIGTERM to
	// the batch shell before the time limit.
	for _, want := range []string{"#SBATCH --ntasks-per-node=1", "#SBATCH --cpus-per-task=", "#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --signal=B:TERM@"} {
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q", file, want)
		}
	}
	// The script hands over to 'dpvm slurm' with exec, so that the batch
	// shell's SIGTERM reaches it.
	re := regexp.MustCompile(`(?m)^exec "\$\{DPVM:-dpvm\}" (\w+) `)
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s does not exec dpvm", file)
	}
	if err := checkCommandLine(newApp(io.Discard, io.Discard), []string{"dpvm", m[1]}); err != nil || m[1] != "slurm" {
		t.Errorf("%s runs dpvm %s: %v", file, m[1], err)
	}
}

// TestDeployREADME checks that every service file is documented (the
// commands the README shows are checked with every README's).
func TestDeployREADME(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(deployDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "README.md" {
			return err
		}
		rel, _ := filepath.Rel(deployDir, path)
		if !strings.Contains(string(b), rel) {
			t.Errorf("README.md does not mention %s", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
