package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/daemon/pki"
	"github.com/dpvm/dpvm/task"
)

// historyMax bounds the console's history, in memory and in its file.
const historyMax = 1000

// Sentinel errors of the console.
var (
	// errUnterminated: a quote is not closed before the end of the line.
	errUnterminated = errors.New("unterminated quote")
	// errInterrupted: the user typed ^C at the prompt.
	errInterrupted = errors.New("interrupted")
)

func consoleCommand() *cli.Command {
	return &cli.Command{
		Name:  "console",
		Usage: "control a running virtual machine interactively: every command of this list that acts on one, with Tab completion",
		Description: "The console connects once to the master and reads commands, one a line, with the\n" +
			"same flags as the one-shot commands ('help' lists them). The output of jobs started\n" +
			"with run or restart shows in the console as it comes. On a terminal it edits lines\n" +
			"(Home, End, Tab completes commands, flags, TIDs and hosts) and keeps a history\n" +
			"(up/down arrows); otherwise it reads a script from standard input without a prompt,\n" +
			"waits for the jobs it started and exits with status 1 if a command or job failed:\n" +
			"  echo 'ps -a' | dpvm console --master 127.0.0.1:7070 --credential admin.pem\n" +
			"quit, exit or the end of input leaves; halt stops the virtual machine and leaves.",
		Flags: vmFlags(&cli.StringFlag{
			Name:    "history",
			Value:   "~/.dpvm_history",
			Usage:   "file keeping the history of commands typed on a terminal (\"\": none)",
			EnvVars: []string{"DPVM_HISTORY"},
		}),
		Action: consoleAction,
	}
}

func consoleAction(c *cli.Context) error {
	addr := c.String("master")
	if addr == "" {
		return cli.Exit("console: no virtual machine named: give --master ADDR or set DPVM_MASTER", 2)
	}
	key, err := loadCredential(c)
	if err != nil {
		return cli.Exit("console: "+err.Error(), 2)
	}
	ctx := c.Context
	con := &console{addr: addr, key: key, timeout: c.Duration("timeout"), out: c.App.Writer, errOut: c.App.ErrWriter}
	if err := con.connect(ctx); err != nil {
		return cli.Exit("console: "+err.Error(), 1)
	}
	defer con.close()

	stdin, _ := c.App.Reader.(*os.File)
	if stdin == nil || !term.IsTerminal(int(stdin.Fd())) {
		// Jobs started with run write to the console as well.
		var mu sync.Mutex
		con.out, con.errOut = &lockedWriter{mu: &mu, w: con.out}, &lockedWriter{mu: &mu, w: con.errOut}
		con.loop(ctx, plainLines{bufio.NewReader(c.App.Reader)}, nil)
		con.jobs.wait() // a script's jobs show their output to the end
		if con.failed || con.jobs.failed.Load() {
			return cli.Exit("", 1)
		}
		return nil
	}

	// A terminal: raw mode while a line is typed, line editing, history,
	// and ^C cancelling the command in progress.
	hist := newHistory(historyMax)
	if path := expandHome(c.String("history")); path != "" {
		if err := hist.open(path); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "dpvm console: history not kept: %v\n", err)
		}
	}
	defer hist.close()
	tl := newTermLines(stdin, c.App.Writer, int(stdin.Fd()), hist)
	con.out, con.errOut, con.interactive = tl, tl, true
	tl.setCompleter(newCompleter(con, tl))
	fmt.Fprintf(tl, "connected to the master %s at %s; 'help' lists the commands, 'quit' leaves\n", con.cl.Master().Name, addr)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	con.loop(ctx, tl, sigs)
	return nil
}

// A console runs commands against a running virtual machine through one
// connection to its master, made anew when it is lost.
type console struct {
	addr    string
	key     *pki.Credential
	timeout time.Duration // per command
	out     io.Writer     // command output
	errOut  io.Writer     // errors and notices

	cl     *daemon.Client // nil after the connection was lost
	failed bool           // a command failed
	halted bool           // the virtual machine was halted

	interactive bool // reading a terminal

	jobs consoleJobs // jobs started with run and restart, their output shown here
}

// lineReader reads the console's input, one line at a time without its end
// of line. It may return a last line together with io.EOF.
type lineReader interface {
	ReadLine() (string, error)
}

// loop runs the commands read from lr until the input ends or a command
// leaves the console. sigs, if not nil, delivers ^C, which cancels the
// command in progress.
func (con *console) loop(ctx context.Context, lr lineReader, sigs <-chan os.Signal) {
	for {
		line, err := lr.ReadLine()
		if errors.Is(err, errInterrupted) {
			continue
		}
		if err != nil && line == "" {
			if !errors.Is(err, io.EOF) {
				con.fail(fmt.Errorf("console: %w", err))
			}
			return
		}
		if con.execInterruptible(ctx, line, sigs) || err != nil {
			return
		}
	}
}

func (con *console) execInterruptible(ctx context.Context, line string, sigs <-chan os.Signal) bool {
	if sigs == nil {
		return con.exec(ctx, line)
	}
	for len(sigs) > 0 { // a ^C from before this command is not for it
		<-sigs
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-sigs:
			cancel(errInterrupted)
		case <-done:
		}
	}()
	return con.exec(ctx, line)
}

// A consoleEntry is one command of the console: its words ("ps", or a
// command and its subcommand, "sched status"), its synopsis for help, and
// how to build it for a console, its Action set. To give the console a
// command, add an entry to consoleCommands.
type consoleEntry struct {
	path     string
	synopsis string
	build    func(con *console) *cli.Command
}

// words splits the entry's path.
func (e consoleEntry) words() []string { return strings.Fields(e.path) }

// consoleCommands are the console's commands, in the order help lists
// them: every command of the command line that acts on a running virtual
// machine.
var consoleCommands = []consoleEntry{
	{"conf", "conf [--json]", onClient(confControl)},
	{"ps", "ps [-a] [--json]", onClient(psControl)},
	{"spawn", "spawn TYPE [-n N] [--host H] [--json] [-- FLAGS | JSON]", onClient(spawnControl)},
	{"run", "run PROGRAM [--checkpoint-every D] [--keep N] [-- FLAGS]", (*console).runCommand},
	{"kill", "kill TID... [--json]", onClient(killControl)},
	{"delete", "delete HOST... [--json]", onClient(deleteControl)},
	{"migrate", "migrate TID --to HOST [--via direct|indirect] [--json]", onClient(migrateControl)},
	{"checkpoint", "checkpoint JOB [--dir DIR] [--json]", onClient(checkpointControl)},
	{"restart", "restart DIR [--checkpoint-every D] [--keep N]", (*console).restartCommand},
	{"sched status", "sched status [--json]", onClient(schedStatusControl)},
	{"load inject", "load inject HOST [--users N] [--load L] [--mem-free MIB] [--for D] [--add] [--clear]", onClient(loadInjectControl)},
	{"add", "add HOST [user=U] [port=P] [name=N] ... [--copy] [--json]", (*console).addCommand},
	{"halt", "halt [--json]", onClient(haltControl)},
}

// onClient builds a console command from a control command: it runs on the
// console's connection to the master.
func onClient(f func() controlCommand) func(*console) *cli.Command {
	return func(con *console) *cli.Command {
		cc := f()
		cmd := cc.cmd
		cmd.Action = func(c *cli.Context) error { return con.act(c, cc) }
		return cmd
	}
}

// lookupConsoleCommand finds the entry whose words begin words: it returns
// the entry and how many words its path took, or an error naming what is
// unknown.
func lookupConsoleCommand(words []string) (consoleEntry, int, error) {
	var subs []string
	for _, e := range consoleCommands {
		ew := e.words()
		if ew[0] != words[0] {
			continue
		}
		if len(ew) == 1 {
			return e, 1, nil
		}
		if len(words) > 1 && slices.Equal(ew, words[:len(ew)]) {
			return e, len(ew), nil
		}
		subs = append(subs, ew[1])
	}
	switch {
	case len(subs) > 0 && len(words) == 1:
		return consoleEntry{}, 0, fmt.Errorf("%s: name a command: %s (see 'help %s')", words[0], strings.Join(subs, ", "), words[0])
	case len(subs) > 0:
		return consoleEntry{}, 0, fmt.Errorf("%s: unknown command %q (commands: %s)", words[0], words[1], strings.Join(subs, ", "))
	}
	return consoleEntry{}, 0, fmt.Errorf("unknown command %q ('help' lists the commands)", words[0])
}

// exec runs one line of input and reports whether the console should
// leave. Errors are printed as one line; the console goes on.
func (con *console) exec(ctx context.Context, line string) (leave bool) {
	words, err := splitWords(line)
	if err != nil {
		con.fail(err)
		return false
	}
	if len(words) == 0 {
		return false
	}
	switch words[0] {
	case "quit", "exit":
		return con.leave()
	case "help", "?":
		if err := con.help(ctx, words[1:]); err != nil {
			con.fail(err)
		}
		return false
	}
	e, n, err := lookupConsoleCommand(words)
	if err != nil {
		con.fail(err)
		return false
	}
	if err := con.run(ctx, e, words[n:]); err != nil {
		con.fail(err)
		return false
	}
	if con.halted { // halt said so
		return true
	}
	return false
}

// run parses args with e's flags, which may come before or after the
// positional arguments, and runs e on the console.
func (con *console) run(ctx context.Context, e consoleEntry, args []string) error {
	cmd := e.build(con)
	name := e.path
	// The console's name of the command, which urfave/cli's HelpName is
	// not ("dpvm console sched status").
	cmd.CustomHelpTemplate = strings.ReplaceAll(consoleCommandHelp, "{{.HelpName}}", name)
	cmd.Description = strings.ReplaceAll(cmd.Description, "  dpvm ", "  ")
	cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
		return fmt.Errorf("%s: %w (see 'help %s')", name, err, name)
	}
	act := cmd.Action
	cmd.Action = func(c *cli.Context) error {
		err := act(c)
		if err != nil && errors.Is(context.Cause(ctx), errInterrupted) {
			return fmt.Errorf("%s: %w", name, errInterrupted)
		}
		return err
	}
	// A command of two words is the subcommand of a parent made for it.
	words := e.words()
	top := cmd
	for i := len(words) - 2; i >= 0; i-- {
		top = &cli.Command{Name: words[i], Subcommands: []*cli.Command{top}}
	}
	app := &cli.App{
		Name:            "dpvm console",
		Writer:          con.out,
		ErrWriter:       con.errOut,
		Reader:          strings.NewReader(""),
		HideVersion:     true,
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {},
		Commands:        []*cli.Command{top},
	}
	argv := append(append([]string{app.Name}, words...), args...)
	return app.RunContext(ctx, reorderArgs(app, argv))
}

// act runs cc's action on the console's connection, connecting again
// first if it was lost.
func (con *console) act(c *cli.Context, cc controlCommand) error {
	ctx := c.Context
	name := commandName(c)
	cl, err := con.client(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, con.timeout)
	defer cancel()
	err = cc.act(c, cl, cctx)
	if errors.Is(err, daemon.ErrNotConnected) {
		con.drop()
	}
	var ec cli.ExitCoder
	if err != nil && !errors.As(err, &ec) {
		return withContext(name, err)
	}
	if err == nil && name == "halt" {
		con.halted = true
	}
	return err
}

// consoleCommandHelp is the template of 'help COMMAND' in the console;
// {{.HelpName}} is replaced by the command's name before use.
const consoleCommandHelp = `{{.HelpName}}: {{.Usage}}

usage: {{.HelpName}}{{if .VisibleFlags}} [flags]{{end}}{{if .ArgsUsage}} {{.ArgsUsage}}{{end}}{{if .Description}}

{{.Description}}{{end}}{{if .VisibleFlags}}

flags:{{range .VisibleFlags}}
   {{.}}{{end}}{{end}}
`

// help lists the commands, or describes the one named.
func (con *console) help(ctx context.Context, args []string) error {
	switch {
	case len(args) > 2:
		return fmt.Errorf("help: one command at most, got %d words", len(args))
	case len(args) == 1:
		switch args[0] {
		case "quit", "exit":
			fmt.Fprintln(con.out, "quit, exit: leave the console (so does the end of input); the virtual machine runs on")
			return nil
		case "help", "?":
			fmt.Fprintln(con.out, "help [COMMAND]: list the commands, or describe one")
			return nil
		}
		if listed := con.helpGroup(args[0]); listed {
			return nil
		}
		e, n, err := lookupConsoleCommand(args)
		if err != nil {
			return fmt.Errorf("help: %w", err)
		}
		return con.run(ctx, e, append(args[n:], "--help"))
	case len(args) == 2:
		e, n, err := lookupConsoleCommand(args)
		if err != nil || n != 2 {
			return fmt.Errorf("help: unknown command %q", strings.Join(args, " "))
		}
		return con.run(ctx, e, []string{"--help"})
	}
	tw := tabwriter.NewWriter(con.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Commands (flags may come before or after the arguments; Tab completes):")
	for _, e := range consoleCommands {
		fmt.Fprintf(tw, "  %s\t%s\n", e.synopsis, e.build(con).Usage)
	}
	fmt.Fprintf(tw, "  help [COMMAND]\tlist the commands, or describe one\n")
	fmt.Fprintf(tw, "  quit, exit\tleave the console; the virtual machine runs on\n")
	fmt.Fprintln(tw, "Words may be quoted with '...' or \"...\". The output of jobs started with run and restart\n"+
		"shows here as it comes; that of tasks started with spawn is printed by the master daemon.")
	return tw.Flush()
}

// helpGroup lists the commands under word when it is the first of
// commands of two words ("sched"), and reports whether it was.
func (con *console) helpGroup(word string) bool {
	tw := tabwriter.NewWriter(con.out, 0, 4, 2, ' ', 0)
	listed := false
	for _, e := range consoleCommands {
		if ew := e.words(); len(ew) > 1 && ew[0] == word {
			fmt.Fprintf(tw, "  %s\t%s\n", e.synopsis, e.build(con).Usage)
			listed = true
		}
	}
	_ = tw.Flush()
	return listed
}

// fail reports a command's error as one line.
func (con *console) fail(err error) {
	con.failed = true
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	msg = strings.ReplaceAll(msg, "(see 'dpvm ", "(see '")
	fmt.Fprintln(con.errOut, msg)
}

// connect dials the master.
func (con *console) connect(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, con.timeout)
	defer cancel()
	cl, err := daemon.Dial(dctx, con.addr, con.key)
	if err != nil {
		return err
	}
	con.cl = cl
	return nil
}

// client returns the connection to the master, checking first that it is
// still up, and connects again when it was lost.
func (con *console) client(ctx context.Context) (*daemon.Client, error) {
	if con.cl != nil {
		pctx, cancel := context.WithTimeout(ctx, con.timeout)
		err := con.cl.Ping(pctx)
		cancel()
		if err == nil {
			return con.cl, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		con.drop()
		fmt.Fprintf(con.errOut, "connection to the master at %s lost (%v); reconnecting\n", con.addr, err)
	} else {
		fmt.Fprintf(con.errOut, "reconnecting to the master at %s\n", con.addr)
	}
	if err := con.connect(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(con.errOut, "reconnected to the master %s at %s\n", con.cl.Master().Name, con.addr)
	return con.cl, nil
}

// drop forgets a lost connection; the next command connects again.
func (con *console) drop() {
	if con.cl != nil {
		con.cl.Close()
		con.cl = nil
	}
}

// close stops the console: the jobs it started are killed (their
// connections close) and waited for, and its connection closes.
func (con *console) close() {
	con.jobs.stop()
	con.drop()
}

// migrateControl moves a task to another host.
func migrateControl() controlCommand {
	return controlCommand{
		cmd: &cli.Command{
			Name:      "migrate",
			Usage:     "move a running task to another host",
			ArgsUsage: "TID",
			Description: "The task is suspended at its next safe point and its checkpoint moves\n" +
				"--via direct (daemon to daemon over QUIC) or --via indirect (through the shared\n" +
				"directory the daemons were started with, --shared-dir). Waits for the move to\n" +
				"commit and prints the time it took and the checkpoint's size.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "to", Usage: "host to move the task to (name or h<ID>; name:N or id:hN where a name is another host's ID)"},
				&cli.StringFlag{Name: "via", Value: "direct", Usage: "direct or indirect"},
				jsonFlag(),
			},
		},
		act: func(c *cli.Context, cl *daemon.Client, ctx context.Context) error {
			if c.NArg() != 1 {
				return cli.Exit(fmt.Sprintf("migrate: give one TID, got %d arguments", c.NArg()), 2)
			}
			if _, err := task.ParseTID(c.Args().First()); err != nil {
				return cli.Exit("migrate: "+err.Error(), 2)
			}
			if c.String("to") == "" {
				return cli.Exit("migrate: no destination: give --to HOST", 2)
			}
			via, err := daemon.ParseVia(c.String("via"))
			if err != nil {
				return cli.Exit("migrate: "+err.Error(), 2)
			}
			tid, _ := task.ParseTID(c.Args().First())
			res, err := cl.Migrate(ctx, tid, c.String("to"), via)
			if errors.Is(err, task.ErrNoSuchTask) {
				// Not the hop that said so: the task is gone.
				return fmt.Errorf("migrate %v to %s: %w: it has exited, or never ran ('dpvm ps -a' lists the tasks)", tid, c.String("to"), task.ErrNoSuchTask)
			}
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, res)
			}
			fmt.Fprintf(c.App.Writer, "migrated %v from %v to %v %s in %.3f s (frozen %.1f ms, checkpoint %d bytes)\n",
				res.TID, res.From, res.To, res.Via, res.Seconds, res.FreezeMS, res.CheckpointBytes)
			return nil
		},
	}
}

// splitWords splits a line into words as a POSIX shell does, without
// expansions: blanks separate words; '...' quotes literally; "..." quotes
// with \" and \\ as escapes; outside quotes a backslash escapes the next
// character; a # at the start of a word begins a comment.
func splitWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; ch {
		case ' ', '\t', '\n', '\r', '\v', '\f':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case '#':
			if !inWord {
				return words, nil
			}
			cur.WriteByte(ch)
		case '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("%w: ' opened at column %d", errUnterminated, i+1)
			}
			cur.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case '"':
			start := i
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && (line[i+1] == '"' || line[i+1] == '\\') {
					i++
				}
				cur.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, fmt.Errorf("%w: \" opened at column %d", errUnterminated, start+1)
			}
			inWord = true
		case '\\':
			if i+1 < len(line) {
				i++
			}
			cur.WriteByte(line[i])
			inWord = true
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// A lockedWriter serializes writes to w with the writers sharing mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// plainLines reads lines from a stream that is not a terminal.
type plainLines struct{ r *bufio.Reader }

func (p plainLines) ReadLine() (string, error) {
	line, err := p.r.ReadString('\n')
	line = strings.TrimSuffix(line, "\n")
	line = strings.TrimSuffix(line, "\r")
	return line, err
}

// termLines reads lines from a terminal with line editing and history.
// Output written to it goes to the terminal too, out of the way of the
// line being edited.
type termLines struct {
	rw   io.ReadWriter
	in   *ctrlCWatch
	hist term.History
	fd   int // the terminal put in raw mode while a line is read; -1: none
	t    *term.Terminal
	intr int // ^Cs answered
	comp *completer
}

func newTermLines(in io.Reader, out io.Writer, fd int, hist term.History) *termLines {
	w := &ctrlCWatch{r: &homeEndKeys{r: in}}
	tl := &termLines{rw: struct {
		io.Reader
		io.Writer
	}{w, out}, in: w, hist: hist, fd: fd}
	tl.reset()
	return tl
}

// reset starts a fresh line editor, dropping the line being typed.
func (tl *termLines) reset() {
	tl.t = term.NewTerminal(tl.rw, "dpvm> ")
	tl.t.History = tl.hist
	if tl.comp != nil {
		tl.t.AutoCompleteCallback = tl.comp.callback
	}
}

// setCompleter makes Tab complete with cp.
func (tl *termLines) setCompleter(cp *completer) {
	tl.comp = cp
	tl.t.AutoCompleteCallback = cp.callback
}

func (tl *termLines) Write(p []byte) (int, error) { return tl.t.Write(p) }

func (tl *termLines) ReadLine() (string, error) {
	if tl.fd >= 0 {
		if w, h, err := term.GetSize(tl.fd); err == nil && w > 0 {
			_ = tl.t.SetSize(w, h)
		}
		old, err := term.MakeRaw(tl.fd)
		if err != nil {
			return "", fmt.Errorf("terminal: %w", err)
		}
		defer term.Restore(tl.fd, old)
	}
	line, err := tl.t.ReadLine()
	switch {
	case errors.Is(err, term.ErrPasteIndicator):
		err = nil
	case errors.Is(err, io.EOF) && tl.in.seen > tl.intr:
		tl.intr = tl.in.seen
		fmt.Fprint(tl.rw, "^C\r\n")
		tl.reset()
		return "", errInterrupted
	case errors.Is(err, io.EOF):
		fmt.Fprint(tl.rw, "\r\n")
	}
	return line, err
}

// ctrlCWatch counts the ^Cs typed, which the terminal reports as the end
// of input: at the prompt a ^C only drops the line being typed.
type ctrlCWatch struct {
	r    io.Reader
	seen int
}

func (w *ctrlCWatch) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	w.seen += bytes.Count(p[:n], []byte{3})
	return n, err
}

// history is the console's bounded history of commands, kept in a file
// across sessions. It implements term.History.
type history struct {
	lines []string // oldest first
	max   int
	f     *os.File // appended to as lines are added; nil: memory only
}

func newHistory(max int) *history { return &history{max: max} }

// open loads the history kept in path (if any) and appends to it from now
// on. A file grown past twice the bound is rewritten with its last lines.
func (h *history) open(path string) error {
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("history: %w", err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > h.max {
		if len(lines) > 2*h.max {
			keep := strings.Join(lines[len(lines)-h.max:], "\n") + "\n"
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, []byte(keep), 0o600); err != nil {
				return fmt.Errorf("history: %w", err)
			}
			if err := os.Rename(tmp, path); err != nil {
				return fmt.Errorf("history: %w", err)
			}
		}
		lines = lines[len(lines)-h.max:]
	}
	h.lines = append(h.lines[:0], lines...)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	h.f = f
	return nil
}

// Add records a line typed, unless it is blank or repeats the last one.
func (h *history) Add(line string) {
	if strings.TrimSpace(line) == "" || strings.ContainsAny(line, "\n\r") ||
		(len(h.lines) > 0 && h.lines[len(h.lines)-1] == line) {
		return
	}
	h.lines = append(h.lines, line)
	if len(h.lines) > h.max {
		h.lines = append(h.lines[:0], h.lines[len(h.lines)-h.max:]...)
	}
	if h.f != nil {
		if _, err := io.WriteString(h.f, line+"\n"); err != nil {
			h.f.Close()
			h.f = nil
		}
	}
}

// Len is the number of lines kept.
func (h *history) Len() int { return len(h.lines) }

// At returns a line: 0 is the most recent.
func (h *history) At(i int) string { return h.lines[len(h.lines)-1-i] }

func (h *history) close() {
	if h.f != nil {
		h.f.Close()
		h.f = nil
	}
}

// expandHome replaces a leading ~/ with the user's home directory.
func expandHome(path string) string {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		return filepath.Join(home, rest)
	}
	return path
}
