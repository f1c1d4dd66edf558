package cli

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseHostfile(t *testing.T) {
	const in = `# a cluster
node1                       # the master: the first line
alice@node2 port=2222 name=n2 speed=2 cores=8
[fd00::3] user=bob shared-dir=/mnt/dpvm flags="--heartbeat 2s --listen '0.0.0.0:7071'"

`
	got, err := parseHostfile(strings.NewReader(in), "hosts.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := []hostLine{
		{Host: "node1", Name: "node1", Master: true, Line: 2},
		{Host: "node2", User: "alice", Port: 2222, Name: "n2", Speed: 2, Cores: 8, Line: 3},
		{Host: "fd00::3", User: "bob", Name: "fd00::3", SharedDir: "/mnt/dpvm", Flags: []string{"--heartbeat", "2s", "--listen", "0.0.0.0:7071"}, Line: 4},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
	if p, err := got[2].listenPort(7070); err != nil || p != 7071 {
		t.Errorf("listenPort of %v: %d %v, want 7071", got[2].Flags, p, err)
	}
	if p, err := got[0].listenPort(7070); err != nil || p != 7070 {
		t.Errorf("listenPort without --listen: %d %v, want 7070", p, err)
	}
}

func TestParseHostfileMasterKeyword(t *testing.T) {
	got, err := parseHostfile(strings.NewReader("a\nb\nc master\nd\n"), "h")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, h := range got {
		order = append(order, h.Name)
		if h.Master != (h.Name == "c") {
			t.Errorf("%s: master %v", h.Name, h.Master)
		}
	}
	if strings.Join(order, " ") != "c a b d" {
		t.Errorf("order %v, want the master first, the others in file order", order)
	}
}

func TestParseHostfileErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "h: no hosts"},
		{"# only a comment\n", "h: no hosts"},
		{"a\nb bogus=1\n", "h:2: unknown option \"bogus\""},
		{"a\nb port=0\n", "h:2: port=0: out of range"},
		{"a\nb port=x\n", "h:2: port=x: strconv"},
		{"a\na\n", "h:2: host name \"a\" already on line 1"},
		{"a master\nb master\n", "h:2: a second master (the first is on line 1)"},
		{"a speed=-1\n", "h:1: speed=-1: want a positive factor"},
		{"a cores=0\n", "h:1: cores=0: want a positive count"},
		{"a name=x/y\n", "h:1: name=x/y: no spaces or slashes"},
		{"a flags=\"--join x\"\n", "h:1: flags=--join x: --join is set by dpvm up"},
		{"a flags=\"--listen\"\n", ""}, // caught by listenPort
		{"a flags=\"unterminated\n", "h:1: unterminated quote"},
		{"user=x a\n", "h:1: \"user=x\": the line must start with the host"},
		{"a user=x user=y\n", "h:1: user given twice"},
		{"u@a user=y\n", "h:1: user given twice (user@host and user=)"},
		{"a name=\n", "h:1: name: empty value"},
		{"a loose\n", "h:1: \"loose\": want key=value"},
		{"@a\n", "h:1: \"@a\": want user@host"},
		{"-oProxyCommand=x\n", "the line must start with the host"},
	} {
		_, err := parseHostfile(strings.NewReader(tc.in), "h")
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
			continue
		}
		if !errors.Is(err, errHostfile) {
			t.Errorf("%q: %v is not errHostfile", tc.in, err)
		}
	}
	h, _ := parseHostWords([]string{"a", "flags=--listen"})
	if _, err := h.listenPort(7070); err == nil {
		t.Error("--listen without an address: no error")
	}
	h, _ = parseHostWords([]string{"a", "flags=--listen=0.0.0.0:0"})
	if _, err := h.listenPort(7070); err == nil {
		t.Error("--listen with port 0: no error (hosts could not join it)")
	}
}

func TestParseHostfileBounded(t *testing.T) {
	big := strings.Repeat("# padding\n", maxHostfile/10+1)
	_, err := parseHostfile(strings.NewReader(big+"a\n"), "h")
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("a hostfile over %d bytes: %v", maxHostfile, err)
	}
}
