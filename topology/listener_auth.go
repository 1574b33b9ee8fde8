package topology

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/leafline/leafline/topology/internal/syntax"
)

// DefaultClientUser is the user name of ClientAuth when it names none.
const DefaultClientUser = "leafline"

// LocalUser is the user that clients of a site's own client listener (the
// leafline process, its CLI, local applications) are mapped to, without
// credentials, when the site defines leafnode users. Only a non-leafnode
// connection may use it, so a leafnode that dials without credentials is
// refused. leafline's embedded servers and rendered configurations both
// define it.
const LocalUser = "leafline-local"

// LocalUserConnectionTypes are the connection types LocalUser may use.
var LocalUserConnectionTypes = []string{"STANDARD", "WEBSOCKET", "IN_PROCESS", "MQTT"}

// validateClientListener checks nats.listen against nats.allow_remote and
// nats.auth: every client of the listener has full access to the box's
// streams and JetStream API, so it listens beyond this machine only when
// allowed, and then only for clients that authenticate.
func (c *Config) validateClientListener(p *problems) {
	n := c.NATS
	host, _, _ := net.SplitHostPort(n.Listen)
	if !n.AllowRemote && !syntax.IsLoopback(host) {
		what := fmt.Sprintf("host %q", host)
		if host == "" {
			what = "an empty host (every interface)"
		}
		p.add("nats.listen", "%s is not a loopback address; every client of this listener has full access to the box's streams, so set nats.allow_remote (with nats.auth) to accept clients beyond this machine", what)
	}
	a := n.Auth
	if n.AllowRemote && a.PasswordFile == "" && a.PasswordEnv == "" {
		p.add("nats.auth", "required with nats.allow_remote: password_file or password_env, which every client then presents (a remote client would otherwise have full access to the box's streams)")
	}
	if a.IsZero() {
		return
	}
	if a.PasswordFile != "" && a.PasswordEnv != "" {
		p.add("nats.auth", "set one of password_file and password_env, not both")
	}
	if a.PasswordFile == "" && a.PasswordEnv == "" {
		p.add("nats.auth", "password_file or password_env is required")
	}
	if a.User != "" {
		p.name("nats.auth.user", a.User, maxSiteName)
	}
	if a.PasswordEnv != "" && !envName.MatchString(a.PasswordEnv) {
		p.add("nats.auth.password_env", "%q is not an environment variable name", a.PasswordEnv)
	}
}

// ClientCredentials returns the user and password clients of the box's
// NATS listener present, read from nats.auth's file or environment
// variable; ok is false when the listener takes no credentials. The error
// never contains the password.
func (c *Config) ClientCredentials() (user, password string, ok bool, err error) {
	a := c.NATS.Auth
	if a.PasswordFile == "" && a.PasswordEnv == "" {
		return "", "", false, nil
	}
	user = a.User
	if user == "" {
		user = DefaultClientUser
	}
	switch {
	case a.PasswordFile != "":
		data, err := os.ReadFile(a.PasswordFile)
		if err != nil {
			return "", "", false, fmt.Errorf("nats.auth.password_file: %w", err)
		}
		password = strings.TrimSpace(string(data))
		if password == "" {
			return "", "", false, fmt.Errorf("nats.auth.password_file: %s is empty", a.PasswordFile)
		}
	default:
		password = strings.TrimSpace(os.Getenv(a.PasswordEnv))
		if password == "" {
			return "", "", false, fmt.Errorf("nats.auth.password_env: environment variable %s is unset or empty", a.PasswordEnv)
		}
	}
	return user, password, true, nil
}
