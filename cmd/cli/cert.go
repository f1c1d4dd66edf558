package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dpvm/dpvm/daemon/pki"
)

// loadCredential reads the credential named by --credential. The flag of
// older releases, --cluster-key, is refused with the command that moves
// its file to the new scheme.
func loadCredential(c *cli.Context) (*pki.Credential, error) {
	if c.String("cluster-key") != "" {
		return nil, fmt.Errorf("--cluster-key (DPVM_CLUSTER_KEY) is no longer taken: %w: %s", pki.ErrLegacyKey, pki.LegacyHint)
	}
	return pki.LoadCredential(c.String("credential"))
}

// nextSteps is what keygen and cert upgrade print after writing dir.
func nextSteps(dir string, cl *pki.Cluster) string {
	ca := filepath.Join(dir, pki.CAFile)
	return fmt.Sprintf(`wrote %[1]s (the cluster CA: keep it offline, no daemon or client needs it),
      %[2]s (the cluster secret: the master's only),
      %[3]s (the master daemon %[5]q) and %[4]s (the admin %[6]q)
start the master:  dpvm daemon --master --credential %[3]s --secret %[2]s --listen 0.0.0.0:7070
issue a host:      dpvm cert host --ca %[7]s --name node2 --out node2.pem
  and join it:     dpvm daemon --join MASTER:7070 --credential node2.pem --listen 0.0.0.0:7070
issue a user:      dpvm cert user --ca %[7]s --name alice --out alice.pem   (--role admin for an admin)
  who connects:    dpvm ps --master MASTER:7070 --credential alice.pem
`, dir, filepath.Join(dir, pki.SecretFile), filepath.Join(dir, pki.MasterFile), filepath.Join(dir, pki.AdminFile),
		cl.Master.Name, cl.Admin.Name, ca)
}

// masterNameFlag and adminNameFlag name the starter credentials.
func masterNameFlag() cli.Flag {
	return &cli.StringFlag{Name: "master-name", Value: "master", Usage: "name of the master daemon (its host certificate's)"}
}

func adminNameFlag() cli.Flag {
	return &cli.StringFlag{Name: "admin-name", Value: "admin", Usage: "name of the first admin"}
}

func keygenCommand() *cli.Command {
	return &cli.Command{
		Name:  "keygen",
		Usage: "create a virtual machine's credentials: the cluster CA, the cluster secret, the master's and an admin's credential",
		Description: "dpvm keygen --out DIR writes DIR/ca.pem (the CA certificate and key: the operator keeps it),\n" +
			"DIR/secret.pem (the cluster secret that authenticates checkpoints: the master's), DIR/master.pem\n" +
			"(the master daemon's credential) and DIR/admin.pem (an admin's), each mode 0600, never overwritten.\n" +
			"'dpvm cert host' and 'dpvm cert user' issue more.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "out", Usage: "directory to write (made if need be); required"},
			masterNameFlag(), adminNameFlag(), jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.String("out") == "" {
				return usageErrorf("keygen", "--out DIR is required")
			}
			cl, err := pki.NewCluster(time.Now(), c.String("master-name"), c.String("admin-name"))
			if err != nil {
				return cli.Exit("keygen: "+err.Error(), 2)
			}
			if err := cl.WriteDir(c.String("out")); err != nil {
				return cli.Exit(err.Error(), 1)
			}
			if c.Bool("json") {
				dir := c.String("out")
				return printJSON(c.App.Writer, map[string]string{"dir": dir, "ca": filepath.Join(dir, pki.CAFile),
					"secret": filepath.Join(dir, pki.SecretFile), "master": filepath.Join(dir, pki.MasterFile), "admin": filepath.Join(dir, pki.AdminFile)})
			}
			fmt.Fprint(c.App.Writer, nextSteps(c.String("out"), cl))
			return nil
		},
	}
}

// lifeFlag is a certificate's lifetime in days.
func lifeFlag(def time.Duration) *cli.IntFlag {
	return &cli.IntFlag{Name: "days", Value: int(def / (24 * time.Hour)), Usage: "days the certificate is valid"}
}

func certCommand() *cli.Command {
	caFlag := &cli.StringFlag{Name: "ca", Usage: "the cluster CA file (DIR/ca.pem from 'dpvm keygen')", EnvVars: []string{"DPVM_CA"}}
	outFlag := &cli.StringFlag{Name: "out", Usage: "credential file to write (mode 0600; never overwritten)"}
	nameFlag := &cli.StringFlag{Name: "name", Usage: "the holder's name (letters, digits, - _ . @)"}
	issue := func(c *cli.Context, f func(ca *pki.CA, days time.Duration) (*pki.Credential, error)) error {
		what := "cert " + c.Command.Name
		for _, f := range []string{"ca", "name", "out"} {
			if c.String(f) == "" {
				return usageErrorf(what, "--%s is required", f)
			}
		}
		ca, err := pki.LoadCA(c.String("ca"))
		if err != nil {
			return cli.Exit(what+": "+err.Error(), 2)
		}
		if c.Int("days") < 1 {
			return cli.Exit(fmt.Sprintf("%s: --days %d: want at least 1", what, c.Int("days")), 2)
		}
		cred, err := f(ca, time.Duration(c.Int("days"))*24*time.Hour)
		if err != nil {
			return cli.Exit(what+": "+err.Error(), 2)
		}
		if err := pki.WriteCredential(c.String("out"), cred); err != nil {
			return cli.Exit(what+": "+err.Error(), 1)
		}
		fmt.Fprintf(c.App.Writer, "wrote %s: %s, serial %s, valid until %s\n", c.String("out"), cred.Peer, cred.Serial, cred.NotAfter.UTC().Format(time.RFC3339))
		return nil
	}
	return &cli.Command{
		Name:  "cert",
		Usage: "issue, inspect and upgrade credentials",
		Subcommands: []*cli.Command{
			{
				Name:      "host",
				Usage:     "issue a daemon's host certificate (its name is the daemon's)",
				ArgsUsage: " ",
				Flags: []cli.Flag{caFlag, nameFlag, outFlag, lifeFlag(pki.DefaultHostLife),
					&cli.BoolFlag{Name: "master", Usage: "the master's certificate: only it drives moves, checkpoints and rollbacks"}},
				Action: func(c *cli.Context) error {
					return issue(c, func(ca *pki.CA, life time.Duration) (*pki.Credential, error) {
						return ca.IssueHost(c.String("name"), c.Bool("master"), time.Now(), life)
					})
				},
			},
			{
				Name:      "user",
				Usage:     "issue a person's user certificate (role user or admin)",
				ArgsUsage: " ",
				Flags: []cli.Flag{caFlag, nameFlag, outFlag, lifeFlag(pki.DefaultUserLife),
					&cli.StringFlag{Name: "role", Value: string(pki.RoleUser), Usage: "user (runs and controls their own jobs, lists everything) or admin (anything)"}},
				Action: func(c *cli.Context) error {
					return issue(c, func(ca *pki.CA, life time.Duration) (*pki.Credential, error) {
						return ca.IssueUser(c.String("name"), pki.Role(c.String("role")), time.Now(), life)
					})
				},
			},
			{
				Name:      "show",
				Usage:     "print whom credential files name, their role, serial and expiry",
				ArgsUsage: "FILE...",
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 {
						return cli.Exit("cert show: give one or more credential files", 2)
					}
					status := 0
					for _, f := range c.Args().Slice() {
						cred, err := pki.LoadCredential(f)
						if err != nil {
							fmt.Fprintf(c.App.ErrWriter, "dpvm: cert show: %v\n", err)
							status = 1
							continue
						}
						fmt.Fprintf(c.App.Writer, "%s: %s, serial %s, valid until %s\n", f, cred.Peer, cred.Serial, cred.NotAfter.UTC().Format(time.RFC3339))
					}
					if status != 0 {
						return cli.Exit("", status)
					}
					return nil
				},
			},
			{
				Name:      "revoke",
				Usage:     "add certificates to the master's revocation list (its --revoked file): by credential file or serial",
				ArgsUsage: "CREDENTIAL|SERIAL...",
				Flags:     []cli.Flag{&cli.StringFlag{Name: "list", Usage: "the revocation list file the master reads (--revoked)"}},
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 || c.String("list") == "" {
						return usageErrorf("cert revoke", "give --list FILE and credential files or serials")
					}
					for _, a := range c.Args().Slice() {
						serial, who := a, ""
						if cred, err := pki.LoadCredential(a); err == nil {
							serial, who = cred.Serial, cred.Peer.String()
						} else if _, statErr := os.Stat(a); statErr == nil {
							return cli.Exit("cert revoke: "+err.Error(), 2)
						}
						if err := pki.AppendRevoked(c.String("list"), serial, who); err != nil {
							return cli.Exit("cert revoke: "+err.Error(), 2)
						}
						fmt.Fprintf(c.App.Writer, "revoked %s %s in %s\n", serial, who, c.String("list"))
					}
					return nil
				},
			},
			{
				Name:      "rotate-secret",
				Usage:     "give the cluster secret file a new current key, keeping the older ones (checkpoints written under them still verify)",
				ArgsUsage: "SECRETFILE",
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return cli.Exit("cert rotate-secret: give the cluster secret file", 2)
					}
					path := c.Args().First()
					ring, err := pki.LoadKeyring(path)
					if err != nil {
						return cli.Exit("cert rotate-secret: "+err.Error(), 2)
					}
					if ring, err = ring.Rotate(); err != nil {
						return cli.Exit("cert rotate-secret: "+err.Error(), 1)
					}
					tmp := path + ".new"
					_ = os.Remove(tmp)
					if err := pki.WriteFile(tmp, ring.PEM()); err != nil {
						return cli.Exit("cert rotate-secret: "+err.Error(), 1)
					}
					if err := os.Rename(tmp, path); err != nil {
						return cli.Exit("cert rotate-secret: "+err.Error(), 1)
					}
					fmt.Fprintf(c.App.Writer, "wrote %s: keys %s (current first); restart the master with it\n", path, strings.Join(ring.IDs(), " "))
					return nil
				},
			},
			{
				Name:      "upgrade",
				Usage:     "move a cluster key file of an older 'dpvm keygen' to credentials: a new CA, a secret keeping the old checkpoint key",
				ArgsUsage: "OLDKEY",
				Flags: []cli.Flag{&cli.StringFlag{Name: "out", Usage: "directory to write, as 'dpvm keygen --out'; required"},
					masterNameFlag(), adminNameFlag()},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 || c.String("out") == "" {
						return usageErrorf("cert upgrade", "give the old cluster key file and --out DIR")
					}
					old, err := os.ReadFile(c.Args().First())
					if err != nil {
						return cli.Exit("cert upgrade: "+err.Error(), 2)
					}
					cl, err := pki.UpgradeCluster(old, time.Now(), c.String("master-name"), c.String("admin-name"))
					if err != nil {
						return cli.Exit("cert upgrade: "+err.Error(), 2)
					}
					if err := cl.WriteDir(c.String("out")); err != nil {
						return cli.Exit("cert upgrade: "+err.Error(), 1)
					}
					fmt.Fprint(c.App.Writer, nextSteps(c.String("out"), cl))
					fmt.Fprintf(c.App.Writer, "the old key's checkpoints verify under key %s of the secret; delete the old key file from every daemon and client\n", cl.Secret.IDs()[1])
					return nil
				},
			},
		},
	}
}
