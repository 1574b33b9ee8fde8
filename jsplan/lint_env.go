package jsplan

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// unsetVar matches nats-server's error for a variable reference that is
// neither defined in the file nor set in the environment.
var unsetVar = regexp.MustCompile(`variable reference for '([^']+)' on line \d+ can not be found`)

// maxUnset bounds the references readConfig stands in for.
const maxUnset = 64

// readConfig reads a nats-server configuration file with the server's own
// parser, and treats each variable reference that is neither defined in
// the file nor set in the environment as set: the shell that lints a
// server's configuration seldom holds the server's secrets (a rendered
// configuration reads its nkey seed and a password-bearing upstream URL
// from the environment). It stands in for each with a value of the same
// shape (a fresh nkey seed for *_NKEY_SEED, a URL for *_URL, a word
// otherwise), only in this process and only while it parses, and returns
// their names in the order the file references them.
//
// It sets and unsets those environment variables: do not call it while
// another goroutine reads them.
func readConfig(path string) (*server.Options, []string, error) {
	var unset []string
	defer func() {
		for _, name := range unset {
			os.Unsetenv(name)
		}
	}()
	for {
		opts, err := server.ProcessConfigFile(path)
		if err == nil {
			return opts, slices.Clone(unset), nil
		}
		m := unsetVar.FindStringSubmatch(err.Error())
		if m == nil || len(unset) == maxUnset || slices.Contains(unset, m[1]) {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if _, set := os.LookupEnv(m[1]); set {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		v, err := standIn(m[1])
		if err != nil {
			return nil, nil, err
		}
		if err := os.Setenv(m[1], v); err != nil {
			return nil, nil, fmt.Errorf("%s: stand in for $%s: %w", path, m[1], err)
		}
		unset = append(unset, m[1])
	}
}

// standIn is a value of the shape the variable name says.
func standIn(name string) (string, error) {
	switch {
	case strings.HasSuffix(name, "_NKEY_SEED"):
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", err
		}
		seed, err := kp.Seed()
		return string(seed), err
	case strings.HasSuffix(name, "_URL"):
		return "nats-leaf://unset:unset@127.0.0.1:7422", nil
	}
	return "unset", nil
}
