package cli

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/urfave/cli/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// k8sObjects are the objects of a manifest, decoded strictly (an unknown
// field is an error) with the Kubernetes API types.
type k8sObjects struct {
	services []corev1.Service
	claims   []corev1.PersistentVolumeClaim
	sets     []appsv1.StatefulSet
}

// decodeManifest decodes every document of file by its kind.
func decodeManifest(t *testing.T, file string) k8sObjects {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objs k8sObjects
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		var into any
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 Service":
			objs.services = append(objs.services, corev1.Service{})
			into = &objs.services[len(objs.services)-1]
		case "v1 PersistentVolumeClaim":
			objs.claims = append(objs.claims, corev1.PersistentVolumeClaim{})
			into = &objs.claims[len(objs.claims)-1]
		case "apps/v1 StatefulSet":
			objs.sets = append(objs.sets, appsv1.StatefulSet{})
			into = &objs.sets[len(objs.sets)-1]
		case " ":
			continue // comments only
		default:
			t.Fatalf("%s: document %d: unexpected %s %s", file, i, meta.APIVersion, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("%s: document %d (%s): %v", file, i, meta.Kind, err)
		}
	}
	return objs
}

// daemonFlags parses args (the container's, with its $(VAR) references
// replaced from vars) with the daemon command's own flags, and returns the
// values of the flags named.
func daemonFlags(t *testing.T, args []string, vars map[string]string, names ...string) (map[string]string, map[string]bool) {
	t.Helper()
	expanded := make([]string, len(args))
	for i, a := range args {
		expanded[i] = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(a, func(ref string) string {
			v, ok := vars[ref[2:len(ref)-1]]
			if !ok {
				t.Errorf("args %q: %s is not in the container's env", args, ref)
			}
			return v
		})
	}
	vals := map[string]string{}
	set := map[string]bool{}
	cmd := daemonCommand()
	cmd.Action = func(c *cli.Context) error {
		for _, n := range names {
			if v := c.Value(n); v != nil {
				vals[n] = fmt.Sprint(v)
			}
			set[n] = c.IsSet(n)
		}
		return nil
	}
	app := &cli.App{Name: "dpvm", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	if len(expanded) == 0 || expanded[0] != "daemon" {
		t.Fatalf("args %q: want dpvm daemon", args)
	}
	if err := app.Run(append([]string{"dpvm"}, expanded...)); err != nil {
		t.Fatalf("dpvm %q: %v", expanded, err)
	}
	return vals, set
}

// dockerUser is the numeric user and group of the Dockerfile's USER.
func dockerUser(t *testing.T, file string) (uid, gid int64) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^USER (\d+):(\d+)\s*$`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("%s: no numeric USER uid:gid", file)
	}
	u, _ := strconv.ParseInt(m[1], 10, 64)
	g, _ := strconv.ParseInt(m[2], 10, 64)
	return u, g
}

// TestKubernetesManifests decodes dpvm.yaml with the Kubernetes API types
// and checks that it would run as written: every name it refers to
// (Service, claim, Secret, volume, port, environment variable) exists;
// the daemon's arguments parse with the daemon command's own flags and
// agree with the container's ports, mounts and resources; the pods run as
// the image's user with an fsGroup that lets it read the Secrets' files
// and write the shared volume; the probes ask the health endpoint the
// daemon serves; and the README creates the Secrets with the files the
// daemons are given.
func TestKubernetesManifests(t *testing.T) {
	file := filepath.Join(deployDir, "kubernetes", "dpvm.yaml")
	objs := decodeManifest(t, file)
	if len(objs.services) != 1 || objs.services[0].Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("want one headless Service (clusterIP: None): %+v", objs.services)
	}
	svc := objs.services[0]
	claims := map[string]corev1.PersistentVolumeClaim{}
	for _, p := range objs.claims {
		if !slices.Contains(p.Spec.AccessModes, corev1.ReadWriteMany) {
			t.Errorf("claim %s: not ReadWriteMany: %v", p.Name, p.Spec.AccessModes)
		}
		if _, ok := p.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
			t.Errorf("claim %s: no storage request", p.Name)
		}
		claims[p.Name] = p
	}
	readme, err := os.ReadFile(filepath.Join(deployDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	uid, gid := dockerUser(t, filepath.Join(deployDir, "kubernetes", "Dockerfile"))
	if len(objs.sets) != 2 {
		t.Fatalf("want two StatefulSets (master, hosts), got %d", len(objs.sets))
	}
	var master *appsv1.StatefulSet
	for i := range objs.sets {
		s := &objs.sets[i]
		t.Run(s.Name, func(t *testing.T) {
			pod := s.Spec.Template
			if s.Spec.ServiceName != svc.Name {
				t.Errorf("serviceName %q, want the headless Service %q", s.Spec.ServiceName, svc.Name)
			}
			for k, v := range s.Spec.Selector.MatchLabels {
				if pod.Labels[k] != v {
					t.Errorf("selector %s=%s does not select the pods (%v)", k, v, pod.Labels)
				}
			}
			for k, v := range svc.Spec.Selector {
				if pod.Labels[k] != v {
					t.Errorf("the Service's selector %s=%s does not select the pods", k, v)
				}
			}
			if len(pod.Spec.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
			}
			c := pod.Spec.Containers[0]

			// The environment: every $(VAR) of args is defined, from the
			// pod's name or the container's own CPU request.
			vars := map[string]string{}
			for _, e := range c.Env {
				switch {
				case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
					if e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
						t.Errorf("env %s: field %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
					}
					vars[e.Name] = s.Name + "-0"
				case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
					r := e.ValueFrom.ResourceFieldRef
					q, ok := c.Resources.Requests[corev1.ResourceName(strings.TrimPrefix(r.Resource, "requests."))]
					if r.ContainerName != c.Name || !strings.HasPrefix(r.Resource, "requests.") || !ok || r.Divisor.String() != "1" {
						t.Errorf("env %s: resource %s of %q (divisor %s): want a request of this container, in whole units", e.Name, r.Resource, r.ContainerName, r.Divisor.String())
					}
					vars[e.Name] = strconv.FormatInt(q.Value(), 10)
				default:
					vars[e.Name] = e.Value
				}
			}
			names := []string{"master", "join", "listen", "name", "credential", "secret", "cores", "shared-dir", "metrics-listen", "metrics-public"}
			flags, set := daemonFlags(t, c.Args, vars, names...)
			isMaster := flags["master"] == "true"
			if isMaster {
				master = s
			}
			if flags["name"] != vars["POD_NAME"] {
				t.Errorf("--name %s: want the pod's name", flags["name"])
			}
			if flags["cores"] != strconv.FormatInt(c.Resources.Requests.Cpu().Value(), 10) {
				t.Errorf("--cores %s: want the CPUs the container requests (%s)", flags["cores"], c.Resources.Requests.Cpu())
			}
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
				t.Errorf("resources %v: want CPU and memory requests", c.Resources.Requests)
			}

			// Ports: the daemon's UDP port and the metrics server's TCP
			// port are the container's, by name.
			ports := map[string]corev1.ContainerPort{}
			for _, p := range c.Ports {
				ports[p.Name] = p
			}
			portOf := func(flag string) int32 {
				_, p, err := net.SplitHostPort(flags[flag])
				n, perr := strconv.Atoi(p)
				if err != nil || perr != nil {
					t.Fatalf("--%s %q: %v %v", flag, flags[flag], err, perr)
				}
				return int32(n)
			}
			if p := ports["dpvm"]; p.ContainerPort != portOf("listen") || p.Protocol != corev1.ProtocolUDP {
				t.Errorf("port dpvm %+v: want UDP %d, the daemon's --listen", p, portOf("listen"))
			}
			if sp := svc.Spec.Ports; len(sp) != 1 || sp[0].Port != portOf("listen") || sp[0].Protocol != corev1.ProtocolUDP {
				t.Errorf("Service ports %+v: want UDP %d", sp, portOf("listen"))
			}
			mp := ports["metrics"]
			if mp.ContainerPort != portOf("metrics-listen") || mp.Protocol != corev1.ProtocolTCP {
				t.Errorf("port metrics %+v: want TCP %d, the daemon's --metrics-listen", mp, portOf("metrics-listen"))
			}
			if host, _, _ := net.SplitHostPort(flags["metrics-listen"]); !set["metrics-public"] || !(host == "0.0.0.0" || host == "" || host == "::") {
				t.Errorf("--metrics-listen %s (--metrics-public %v): the kubelet probes the pod's address", flags["metrics-listen"], set["metrics-public"])
			}
			// Probes: the health endpoint of the metrics server.
			for what, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if p == nil || p.HTTPGet == nil {
					t.Errorf("%s probe: want an HTTP GET", what)
					continue
				}
				port := p.HTTPGet.Port
				if p.HTTPGet.Path != healthPath || !(port.Type == intstr.String && port.StrVal == "metrics" || port.IntValue() == int(mp.ContainerPort)) {
					t.Errorf("%s probe GET %s on %s: want %s on the metrics port", what, p.HTTPGet.Path, port.String(), healthPath)
				}
			}

			// Identity: the image's user, and an fsGroup that owns the
			// volumes.
			sc := pod.Spec.SecurityContext
			if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != uid || sc.RunAsGroup == nil || *sc.RunAsGroup != gid ||
				sc.FSGroup == nil || *sc.FSGroup != gid || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Fatalf("pod securityContext %+v: want runAsNonRoot, runAsUser %d, runAsGroup and fsGroup %d (the Dockerfile's USER)", sc, uid, gid)
			}
			csc := c.SecurityContext
			if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
				t.Errorf("container securityContext %+v: want allowPrivilegeEscalation: false", csc)
			}

			// Volumes: every mount names a volume; the Secret is readable
			// by the fsGroup and holds the files the flags name; the
			// shared directory is the ReadWriteMany claim, writable; a
			// read-only root file system has a writable /tmp.
			volumes := map[string]corev1.Volume{}
			for _, v := range pod.Spec.Volumes {
				volumes[v.Name] = v
			}
			mounts := map[string]corev1.VolumeMount{} // by path
			for _, m := range c.VolumeMounts {
				if _, ok := volumes[m.Name]; !ok {
					t.Errorf("mount %s: no volume %s", m.MountPath, m.Name)
				}
				mounts[m.MountPath] = m
			}
			credDir := filepath.Dir(flags["credential"])
			cm, ok := mounts[credDir]
			if !ok || volumes[cm.Name].Secret == nil {
				t.Fatalf("--credential %s: not in a Secret's mount", flags["credential"])
			}
			sec := volumes[cm.Name].Secret
			if mode := sec.DefaultMode; mode == nil || *mode&0o040 == 0 || *mode&0o007 != 0 {
				t.Errorf("Secret %s defaultMode %o: want group-readable (the fsGroup) and nothing for others", sec.SecretName, derefMode(mode))
			}
			if !strings.Contains(string(readme), fmt.Sprintf("kubectl create secret generic %s ", sec.SecretName)) {
				t.Errorf("the README does not create the Secret %s", sec.SecretName)
			}
			files := []string{flags["credential"]}
			if isMaster {
				files = append(files, flags["secret"])
			} else if flags["secret"] != "" {
				t.Errorf("a host is given --secret %s: the master hands it over", flags["secret"])
			}
			for _, f := range files {
				if filepath.Dir(f) != credDir {
					t.Errorf("%s is not in the Secret's mount %s", f, credDir)
				}
				// The README's command puts that file in the Secret: by
				// name, or the hosts' from a directory of pod-named files.
				base := filepath.Base(f)
				if isMaster {
					if !strings.Contains(string(readme), "--from-file="+base+"=") {
						t.Errorf("the README's Secret %s has no %s", sec.SecretName, base)
					}
				} else if base != vars["POD_NAME"]+".pem" || !strings.Contains(string(readme), "--name "+s.Name+"-$i --out creds/hosts/"+s.Name+"-$i.pem") {
					t.Errorf("host credential %s: want the pod's own, issued by the README into the Secret's directory", base)
				}
			}
			sm, ok := mounts[flags["shared-dir"]]
			if !ok || sm.ReadOnly || volumes[sm.Name].PersistentVolumeClaim == nil {
				t.Fatalf("--shared-dir %s: not a writable mount of a claim", flags["shared-dir"])
			}
			if _, ok := claims[volumes[sm.Name].PersistentVolumeClaim.ClaimName]; !ok {
				t.Errorf("claim %s is not in the manifest", volumes[sm.Name].PersistentVolumeClaim.ClaimName)
			}
			if csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem {
				if m, ok := mounts["/tmp"]; !ok || volumes[m.Name].EmptyDir == nil {
					t.Errorf("read-only root file system without an emptyDir /tmp")
				}
			}
			if isMaster && (s.Spec.Replicas == nil || *s.Spec.Replicas != 1) {
				t.Errorf("master: want one replica")
			}
		})
	}
	if master == nil {
		t.Fatal("no StatefulSet runs the master")
	}
	// The hosts join the master's stable name through the Service, at its
	// port.
	for _, s := range objs.sets {
		if s.Name == master.Name {
			continue
		}
		c := s.Spec.Template.Spec.Containers[0]
		mc := master.Spec.Template.Spec.Containers[0]
		join := flagValue(c.Args, "--join")
		if want := net.JoinHostPort(master.Name+"-0."+svc.Name, strings.TrimPrefix(flagValue(mc.Args, "--listen"), "0.0.0.0:")); join != want {
			t.Errorf("%s: --join %q, want the master's stable name %s", s.Name, join, want)
		}
	}
	// The Dockerfile the manifest's image is built with builds the command.
	b, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "./cmd/dpvm") {
		t.Error("Dockerfile does not build ./cmd/dpvm")
	}
	if _, err := os.Stat("../dpvm/main.go"); err != nil {
		t.Errorf("the Dockerfile's package: %v", err)
	}
}

func derefMode(m *int32) int32 {
	if m == nil {
		return 0
	}
	return *m
}

// kubeShims stand in for docker and kubectl when the README's Kubernetes
// commands run: kubectl create secret generic NAME --from-file=... writes
// the Secret's files into secrets/NAME (KEY=FILE, FILE, or every file of
// DIR/); apply and exec need a cluster and do nothing; anything else fails.
const kubeShims = `set -eu
docker() { :; }
kubectl() {
	case "$1 ${2:-}" in
	"create secret")
		[ "$3" = generic ] || { echo "kubectl shim: $*" >&2; return 1; }
		name=$4; shift 4
		mkdir -p "secrets/$name"
		for a; do
			case $a in
			--from-file=*=*) kv=${a#--from-file=}; cp "${kv#*=}" "secrets/$name/${kv%%=*}" ;;
			--from-file=*/) cp "${a#--from-file=}"* "secrets/$name/" ;;
			--from-file=*) cp "${a#--from-file=}" "secrets/$name/" ;;
			*) echo "kubectl shim: $a" >&2; return 1 ;;
			esac
		done ;;
	"apply -f"|"exec "*) ;;
	*) echo "kubectl shim: $*" >&2; return 1 ;;
	esac
}
`

// TestKubernetesSecretsRun runs the README's Kubernetes commands (dpvm
// itself, the shell around it, and docker and kubectl as kubeShims) in a
// temporary directory, then gives every pod of the manifest the files of
// its Secret at its mount and runs the daemon's own checks on its
// arguments as it starts: its credential loads, is a daemon's, names the
// pod and is the master's exactly on the master; the master's cluster
// secret loads; the metrics endpoint, reachable from the kubelet, has its
// token.
func TestKubernetesSecretsRun(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(deployDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var block string
	for _, b := range strings.Split(string(readme), "```")[1:] {
		if strings.Contains(b, "kubectl apply -f") && strings.Contains(b, "dpvm keygen") {
			block = strings.TrimPrefix(b, "\n")
			break
		}
	}
	if block == "" {
		t.Fatal("the README has no block of Kubernetes commands")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(bin, "dpvm")); err != nil {
		t.Fatal(err)
	}
	sh := exec.Command("sh", "-c", kubeShims+block)
	sh.Dir = dir
	sh.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the README's Kubernetes commands: %v\n%s", err, out)
	}

	objs := decodeManifest(t, filepath.Join(deployDir, "kubernetes", "dpvm.yaml"))
	for _, s := range objs.sets {
		pod := s.Spec.Template.Spec
		c := pod.Containers[0]
		secrets := map[string]string{} // mount path: the Secret's files here
		for _, m := range c.VolumeMounts {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					secrets[m.MountPath] = filepath.Join(dir, "secrets", v.Secret.SecretName)
				}
			}
		}
		if len(secrets) == 0 {
			t.Fatalf("%s mounts no Secret", s.Name)
		}
		replicas := int32(1)
		if s.Spec.Replicas != nil {
			replicas = *s.Spec.Replicas
		}
		for r := range replicas {
			podName := fmt.Sprintf("%s-%d", s.Name, r)
			vars := map[string]string{}
			for _, e := range c.Env {
				vars[e.Name] = e.Value
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
					vars[e.Name] = podName
				}
				if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
					vars[e.Name] = "2"
				}
			}
			var args []string
			for _, a := range c.Args {
				a = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(a, func(ref string) string { return vars[ref[2:len(ref)-1]] })
				for mount, local := range secrets {
					if strings.HasPrefix(a, mount+"/") {
						a = local + strings.TrimPrefix(a, mount)
					}
				}
				args = append(args, a)
			}
			if err := daemonPreflight(args); err != nil {
				t.Errorf("pod %s: dpvm %s: %v", podName, strings.Join(args, " "), err)
			}
		}
	}
}

// daemonPreflight parses args with the daemon command's flags and makes
// the checks the daemon makes of them before it starts, without starting
// it.
func daemonPreflight(args []string) error {
	cmd := daemonCommand()
	cmd.Action = func(c *cli.Context) error {
		cred, err := loadCredential(c)
		if err != nil {
			return err
		}
		switch {
		case cred.Role != pki.RoleDaemon:
			return fmt.Errorf("%s: a %s certificate", c.String("credential"), cred.Role)
		case c.String("name") != "" && c.String("name") != cred.Name:
			return fmt.Errorf("--name %s: the certificate names %s", c.String("name"), cred.Name)
		case cred.Master != c.Bool("master"):
			return fmt.Errorf("--master %v: the certificate's master mark is %v", c.Bool("master"), cred.Master)
		}
		if c.Bool("master") {
			if _, err := pki.LoadKeyring(c.String("secret")); err != nil {
				return err
			}
		}
		if _, err := statusToken(c); err != nil {
			return err
		}
		_, err = endpointTokens(c)
		return err
	}
	app := &cli.App{Name: "dpvm", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	return app.Run(append([]string{"dpvm"}, args...))
}
