package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// maxHostfile bounds a hostfile read by 'dpvm up', before it is parsed.
const maxHostfile = 1 << 20

// errHostfile marks every error about a hostfile's contents.
var errHostfile = errors.New("hostfile")

// A hostLine is one host of a hostfile: where to reach it over ssh and how
// to start its daemon.
type hostLine struct {
	Host      string   `json:"host"`                 // ssh destination: a name or address, without the user
	User      string   `json:"user,omitempty"`       // ssh user ("": ssh's default)
	Port      int      `json:"port,omitempty"`       // ssh port (0: ssh's default)
	Name      string   `json:"name"`                 // the daemon's host name (default: Host)
	Speed     float64  `json:"speed,omitempty"`      // --speed (0: calibrated)
	Cores     int      `json:"cores,omitempty"`      // --cores (0: the machine's)
	SharedDir string   `json:"shared_dir,omitempty"` // --shared-dir
	Flags     []string `json:"flags,omitempty"`      // more daemon flags, after the ones dpvm up gives
	Master    bool     `json:"master,omitempty"`     // this host runs the master
	Line      int      `json:"line,omitempty"`       // line in the hostfile (0: not from one)
}

// hostfileError names the file and line a hostfile error is on.
type hostfileError struct {
	File string
	Line int
	Err  error
}

func (e *hostfileError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

func (e *hostfileError) Unwrap() []error { return []error{errHostfile, e.Err} }

// daemonFlagsOfUp are the daemon flags dpvm up gives itself; a hostfile's
// flags="..." may not repeat them.
var daemonFlagsOfUp = map[string]bool{"master": true, "join": true, "name": true, "credential": true, "secret": true}

// parseHostfile reads a hostfile: a host per line,
//
//	host [master] [user=U] [port=P] [name=N] [speed=S] [cores=C] [shared-dir=DIR] [flags="..."]
//
// with '#' starting a comment and blank lines ignored. The master is the
// host whose line has the keyword master, or else the first; it comes
// first in the result. Host names must be distinct. file names the input
// in errors, which give the line.
func parseHostfile(r io.Reader, file string) ([]hostLine, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxHostfile+1))
	if err != nil {
		return nil, &hostfileError{File: file, Err: err}
	}
	if len(data) > maxHostfile {
		return nil, &hostfileError{File: file, Err: fmt.Errorf("longer than %d bytes", maxHostfile)}
	}
	var hosts []hostLine
	names := map[string]int{}
	master := -1
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxHostfile+1)
	for n := 1; sc.Scan(); n++ {
		words, err := splitWords(sc.Text())
		if err != nil {
			return nil, &hostfileError{File: file, Line: n, Err: err}
		}
		if len(words) == 0 {
			continue
		}
		h, err := parseHostWords(words)
		if err != nil {
			return nil, &hostfileError{File: file, Line: n, Err: err}
		}
		h.Line = n
		if prev, ok := names[h.Name]; ok {
			return nil, &hostfileError{File: file, Line: n, Err: fmt.Errorf("host name %q already on line %d (give name=...)", h.Name, prev)}
		}
		names[h.Name] = n
		if h.Master {
			if master >= 0 {
				return nil, &hostfileError{File: file, Line: n, Err: fmt.Errorf("a second master (the first is on line %d)", hosts[master].Line)}
			}
			master = len(hosts)
		}
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, &hostfileError{File: file, Err: err}
	}
	if len(hosts) == 0 {
		return nil, &hostfileError{File: file, Err: errors.New("no hosts")}
	}
	if master < 0 {
		master = 0
	}
	hosts[master].Master = true
	if master > 0 { // the master first: it is started before the others
		m := hosts[master]
		copy(hosts[1:master+1], hosts[:master])
		hosts[0] = m
	}
	return hosts, nil
}

// parseHostWords parses one host's words: the host ([user@]name or
// address), then the keyword master and key=value options. The console's
// add takes the same words.
func parseHostWords(words []string) (hostLine, error) {
	var h hostLine
	if len(words) == 0 {
		return h, errors.New("no host")
	}
	h.Host = words[0]
	if strings.Contains(h.Host, "=") || strings.HasPrefix(h.Host, "-") || h.Host == "master" {
		return h, fmt.Errorf("%q: the line must start with the host", h.Host)
	}
	if u, host, ok := strings.Cut(h.Host, "@"); ok {
		if u == "" || host == "" {
			return h, fmt.Errorf("%q: want user@host", h.Host)
		}
		h.User, h.Host = u, host
	}
	h.Host = strings.TrimSuffix(strings.TrimPrefix(h.Host, "["), "]")
	seen := map[string]bool{}
	for _, w := range words[1:] {
		if w == "master" {
			if h.Master {
				return h, errors.New("master given twice")
			}
			h.Master = true
			continue
		}
		key, val, ok := strings.Cut(w, "=")
		if !ok {
			return h, fmt.Errorf("%q: want key=value (user, port, name, speed, cores, shared-dir, flags) or master", w)
		}
		if seen[key] {
			return h, fmt.Errorf("%s given twice", key)
		}
		seen[key] = true
		if val == "" {
			return h, fmt.Errorf("%s: empty value", key)
		}
		var err error
		switch key {
		case "user":
			if h.User != "" {
				return h, errors.New("user given twice (user@host and user=)")
			}
			h.User = val
		case "port":
			h.Port, err = strconv.Atoi(val)
			if err == nil && (h.Port < 1 || h.Port > 65535) {
				err = errors.New("out of range 1-65535")
			}
		case "name":
			if strings.ContainsAny(val, " \t/") {
				err = errors.New("no spaces or slashes")
			}
			h.Name = val
		case "speed":
			h.Speed, err = strconv.ParseFloat(val, 64)
			if err == nil && !(h.Speed > 0 && h.Speed < 1e6) {
				err = errors.New("want a positive factor")
			}
		case "cores":
			h.Cores, err = strconv.Atoi(val)
			if err == nil && (h.Cores < 1 || h.Cores > 1<<20) {
				err = errors.New("want a positive count")
			}
		case "shared-dir":
			h.SharedDir = val
		case "flags":
			h.Flags, err = splitWords(val)
			if err == nil {
				err = checkExtraFlags(h.Flags)
			}
		default:
			return h, fmt.Errorf("unknown option %q (want user, port, name, speed, cores, shared-dir or flags)", key)
		}
		if err != nil {
			return h, fmt.Errorf("%s=%s: %w", key, val, err)
		}
	}
	if h.Name == "" {
		h.Name = h.Host
	}
	if strings.ContainsAny(h.Name, "/ \t") || strings.HasPrefix(h.Name, ".") {
		return h, fmt.Errorf("host name %q cannot name files (give name=...)", h.Name)
	}
	return h, nil
}

// checkExtraFlags refuses the daemon flags dpvm up sets itself.
func checkExtraFlags(flags []string) error {
	for _, f := range flags {
		if !strings.HasPrefix(f, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if daemonFlagsOfUp[name] {
			return fmt.Errorf("--%s is set by dpvm up", name)
		}
	}
	return nil
}

// listenPort is the port a host's daemon listens on: the one of a
// --listen among its flags, or def.
func (h hostLine) listenPort(def int) (int, error) {
	port := def
	for i, f := range h.Flags {
		var addr string
		switch {
		case f == "--listen" || f == "-listen":
			if i+1 >= len(h.Flags) {
				return 0, errors.New("--listen without an address")
			}
			addr = h.Flags[i+1]
		case strings.HasPrefix(f, "--listen=") || strings.HasPrefix(f, "-listen="):
			_, addr, _ = strings.Cut(f, "=")
		default:
			continue
		}
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			return 0, fmt.Errorf("--listen %s: %w", addr, err)
		}
		if port, err = strconv.Atoi(p); err != nil || port <= 0 || port > 65535 {
			return 0, fmt.Errorf("--listen %s: want a fixed port: hosts join the master at it", addr)
		}
	}
	return port, nil
}
