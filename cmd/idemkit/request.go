package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemkit/idemkit"
)

// requestFlags are the flags that describe a request (submit, do).
type requestFlags struct {
	url     string
	method  string
	headers []string
	data    string
	key     string
}

func (f *requestFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.url, "url", "", "request URL (required)")
	cmd.Flags().StringVarP(&f.method, "method", "X", http.MethodPost, "request method")
	cmd.Flags().StringArrayVarP(&f.headers, "header", "H", nil, "request header 'Name: value' (repeatable)")
	cmd.Flags().StringVarP(&f.data, "data", "d", "", "request body: a string, @FILE, or @- for stdin")
	cmd.Flags().StringVar(&f.key, "key", "", "Idempotency-Key (default: a new UUID)")
}

func (f *requestFlags) request(stdin io.Reader) (*idemkit.Request, error) {
	if f.url == "" {
		return nil, usagef("--url is required")
	}
	h, err := parseHeaders(f.headers)
	if err != nil {
		return nil, err
	}
	body, err := readData(f.data, stdin)
	if err != nil {
		return nil, err
	}
	return &idemkit.Request{Method: f.method, URL: f.url, Header: h, Body: body, Key: f.key}, nil
}

// parseHeaders parses curl-style 'Name: value' headers. A value that is
// a placeholder (see placeholder) is refused: nothing is sent with it.
func parseHeaders(lines []string) (http.Header, error) {
	h := http.Header{}
	for _, l := range lines {
		name, value, ok := strings.Cut(l, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, usagef("header %q: want 'Name: value'", l)
		}
		value = strings.TrimSpace(value)
		if why := placeholder(name, value); why != "" {
			return nil, usagef("-H %s: %s, not a value: nothing was sent. Set %s to the %s header's value (it is never stored) and give -H \"%s: $%s\"",
				name, why, credEnv(name), http.CanonicalHeaderKey(name), http.CanonicalHeaderKey(name), credEnv(name))
		}
		h.Add(name, value)
	}
	return h, nil
}

// placeholder says why a header value is a placeholder rather than a
// value ("" if it is not): the "…" of a hint, an environment variable the
// shell did not expand, or an empty credential (the variable was unset).
// Sent, a placeholder credential gets a 401 that says nothing about an
// earlier attempt.
func placeholder(name, value string) string {
	switch {
	case strings.Contains(value, "…"), value == "...", strings.HasSuffix(value, " ..."):
		return fmt.Sprintf("%q is a placeholder", value)
	case unexpanded(value):
		return fmt.Sprintf("%q holds an environment variable the shell did not expand", value)
	case value == "" && isCredential(name):
		return "the value is empty (is the environment variable set?)"
	}
	return ""
}

// unexpandedVar is a shell variable reference left as text ($NAME, ${NAME}).
var unexpandedVar = regexp.MustCompile(`^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$`)

// unexpanded reports whether a word of value is a shell variable reference
// left as text (the hint pasted in single quotes, or into a shell that
// does not expand it).
func unexpanded(value string) bool {
	for _, w := range strings.Fields(value) {
		if unexpandedVar.MatchString(w) {
			return true
		}
	}
	return false
}

// isCredential reports whether the header is one of credentialNames.
func isCredential(name string) bool {
	for _, n := range credentialNames {
		if strings.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// credEnv is the environment variable a resume command reads a credential
// header's value from: IDEMKIT_ and the name, upper case, '-' as '_'.
func credEnv(name string) string {
	return "IDEMKIT_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func readData(data string, stdin io.Reader) ([]byte, error) {
	file, ok := strings.CutPrefix(data, "@")
	if !ok {
		return []byte(data), nil
	}
	var r io.Reader = stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("--data: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	return b, nil
}

// maxBody is the largest request body the SDK queues (10 MiB): --data reads
// one byte more, so that a larger body is refused by the SDK, in its words.
const maxBody = 10 << 20

// credentialNames are the headers the client keeps out of the queue.
var credentialNames = []string{"Authorization", "Proxy-Authorization", "Cookie"}

func credentialsIn(h http.Header) []string {
	var out []string
	for _, n := range credentialNames {
		if h.Get(n) != "" {
			out = append(out, n)
		}
	}
	return out
}

// sendFlags are the flags of the commands that send (do, run).
type sendFlags struct {
	timeout     time.Duration
	window      time.Duration
	maxAttempts int
	profiles    []string // --profile NAME or HOST=NAME

	profile     *idemkit.Profile           // for every host
	hostProfile map[string]idemkit.Profile // per host
}

// profileNames are the names KnownProfile knows.
var profileNames = []string{"idemkit", "ietf", "stripe", "stripe-v2", "adyen", "checkout", "paypal"}

func (f *sendFlags) register(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.timeout, "timeout", 0, "stop after this long (0: no limit); work left stays queued (exit 2)")
	cmd.Flags().DurationVar(&f.window, "window", 0, "the server's idempotency window, if shorter than 24h: no attempt starts after it (default 24h, or less if the server advertises it)")
	cmd.Flags().StringArrayVar(&f.profiles, "profile", nil, "the server's idempotency dialect: NAME for every host, or HOST=NAME (host or host:port) for one (repeatable); NAME is one of "+strings.Join(profileNames, ", ")+" (default idemkit)")
	cmd.Flags().IntVar(&f.maxAttempts, "max-attempts", 0, "at most this many attempts per intent in this run (0: until the window ends); the intent stays pending (exit 2)")
}

func (f *sendFlags) validate() error {
	switch {
	case f.timeout < 0:
		return usagef("--timeout %v: must not be negative", f.timeout)
	case f.window != 0 && f.window < time.Second:
		return usagef("--window %v: must be at least 1s", f.window)
	case f.maxAttempts < 0:
		return usagef("--max-attempts %d: must not be negative", f.maxAttempts)
	}
	for _, v := range f.profiles {
		host, name, perHost := strings.Cut(v, "=")
		if !perHost {
			name, host = host, ""
		}
		p, ok := idemkit.KnownProfile(name)
		if !ok {
			return usagef("--profile %q: unknown profile %q: want one of %s", v, name, strings.Join(profileNames, ", "))
		}
		switch {
		case !perHost && f.profile != nil:
			return usagef("--profile %q: a profile for every host is given twice", v)
		case !perHost:
			f.profile = &p
		case host == "" || strings.ContainsAny(host, "/?#@ "):
			return usagef("--profile %q: want HOST=NAME with HOST as in the URL (api.stripe.com or host:port)", v)
		default:
			if f.hostProfile == nil {
				f.hostProfile = map[string]idemkit.Profile{}
			}
			f.hostProfile[strings.ToLower(host)] = p
		}
	}
	return nil
}

// context applies --timeout.
func (f *sendFlags) context(ctx context.Context) (context.Context, context.CancelFunc) {
	if f.timeout > 0 {
		return context.WithTimeoutCause(ctx, f.timeout, errTimeout{f.timeout})
	}
	return context.WithCancel(ctx)
}

// errTimeout is the cause of a context ended by --timeout.
type errTimeout struct{ d time.Duration }

func (e errTimeout) Error() string { return fmt.Sprintf("--timeout %v reached", e.d) }

// config is the SDK configuration of a sending command: the tracker's
// logger and event hook, --max-attempts, the send hook (credentials) and
// the window.
func (f *sendFlags) config(t *tracker, hook func(*http.Request) error) *idemkit.Config {
	return &idemkit.Config{
		Window:      f.window,
		MaxAttempts: f.maxAttempts,
		Profile:     f.profile,
		Profiles:    f.hostProfile,
		Logger:      t.logger(),
		OnEventFunc: t.onEvent,
		SendHookFunc: func(_ string, r *http.Request) error {
			if hook != nil {
				return hook(r)
			}
			return nil
		},
	}
}

// resumeHint is the command that resumes the queued work: the queue, the
// window, and for every credential header it needs a reference to an
// environment variable (credEnv), never a value: pasted unchanged, it sends
// the variable's value, or (unset) is refused by parseHeaders.
func resumeHint(queue string, window time.Duration, host string, creds []string) string {
	parts := []string{"idemkit", "run", "--queue", shellQuote(queue), "--until-done"}
	if window > 0 {
		parts = append(parts, "--window", window.String())
	}
	if host != "" && len(creds) > 0 {
		parts = append(parts, "--host", shellQuote(host))
	}
	var vars []string
	for _, c := range creds {
		parts = append(parts, "-H", `"`+c+": $"+credEnv(c)+`"`)
		vars = append(vars, credEnv(c))
	}
	hint := strings.Join(parts, " ")
	if len(vars) > 0 {
		hint += "\n  (set " + strings.Join(vars, ", ") + " to the header's value first: credentials are never stored)"
	}
	return hint
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
