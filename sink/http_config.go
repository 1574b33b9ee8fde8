package sink

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/leafline/leafline/topology"
)

// httpTLSConfig builds the client's TLS settings from ca_file, cert_file
// and key_file, or returns nil when none is set (the system roots).
func httpTLSConfig(cfg topology.HTTPSinkConfig) (*tls.Config, error) {
	if cfg.CAFile == "" && cfg.CertFile == "" && cfg.KeyFile == "" {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	var errs []error
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		pool := x509.NewCertPool()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("sink.http.ca_file: %w", err))
		case !pool.AppendCertsFromPEM(pem):
			errs = append(errs, fmt.Errorf("sink.http.ca_file: %s holds no PEM certificate", cfg.CAFile))
		default:
			conf.RootCAs = pool
		}
	}
	switch {
	case cfg.CertFile == "" && cfg.KeyFile == "":
	case cfg.CertFile == "" || cfg.KeyFile == "":
		errs = append(errs, errors.New("sink.http.cert_file: cert_file and key_file go together"))
	default:
		certPEM, err := os.ReadFile(cfg.CertFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("sink.http.cert_file: %w", err))
		}
		keyPEM, kerr := os.ReadFile(cfg.KeyFile)
		if kerr != nil {
			errs = append(errs, fmt.Errorf("sink.http.key_file: %w", kerr))
		}
		if err == nil && kerr == nil {
			cert, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				errs = append(errs, fmt.Errorf("sink.http.cert_file: %s with key_file %s: %w", cfg.CertFile, cfg.KeyFile, err))
			}
			conf.Certificates = []tls.Certificate{cert}
		}
	}
	return conf, errors.Join(errs...)
}

// httpHeaders reads headers_file and headers_env. No error quotes a
// header's value, or a line of the file (a line that is not "Name: value"
// may be a bare secret).
func httpHeaders(cfg topology.HTTPSinkConfig) (http.Header, error) {
	h := http.Header{}
	var errs []error
	from := map[string]string{} // canonical name → where it was set
	add := func(path, name, value, where string) {
		key := http.CanonicalHeaderKey(name)
		switch {
		case !httpValidName(name):
			errs = append(errs, fmt.Errorf("%s: not a valid header name", path))
		case httpReserved[key] || strings.HasPrefix(key, "Leafline-"):
			errs = append(errs, fmt.Errorf("%s: header %s is set by the sink", path, key))
		case from[key] != "":
			errs = append(errs, fmt.Errorf("%s: header %s is already set by %s", path, key, from[key]))
		case value == "":
			errs = append(errs, fmt.Errorf("%s: header %s has an empty value", path, key))
		case !httpValidValue(value):
			errs = append(errs, fmt.Errorf("%s: the value of header %s has a character not allowed in a header", path, key))
		default:
			from[key] = where
			h.Set(key, value)
		}
	}
	if f := cfg.HeadersFile; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("sink.http.headers_file: %w", err))
		}
		for n, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			where := fmt.Sprintf("%s line %d", f, n+1)
			path := "sink.http.headers_file: " + where
			name, value, ok := strings.Cut(line, ":")
			if !ok {
				errs = append(errs, fmt.Errorf("%s: not a \"Name: value\" line", path))
				continue
			}
			add(path, strings.TrimSpace(name), strings.TrimSpace(value), where)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.HeadersEnv)) {
		env := cfg.HeadersEnv[name]
		path := httpEnvPath(name)
		value, ok := os.LookupEnv(env)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: environment variable %s is unset", path, env))
			continue
		}
		add(path, name, strings.TrimSpace(value), "headers_env")
	}
	return h, errors.Join(errs...)
}

// httpEnvPath is the config path of headers_env's entry for name.
func httpEnvPath(name string) string {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Sprintf("sink.http.headers_env[%q]", name)
		}
	}
	if name == "" {
		return `sink.http.headers_env[""]`
	}
	return "sink.http.headers_env." + name
}

// httpValidName reports whether name is an HTTP token (RFC 9110 5.1).
func httpValidName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// httpValidValue reports whether v may be sent as a header value: no
// control character other than tab (RFC 9110 5.5).
func httpValidValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
