package systest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leafline/leafline"
	"github.com/leafline/leafline/edge"
	"github.com/leafline/leafline/internal/jstest"
	"github.com/leafline/leafline/l1"
	"github.com/leafline/leafline/sink"
	"github.com/leafline/leafline/status/console"
	"github.com/leafline/leafline/topology"
)

// poisonSink accepts every event except those whose id starts with
// "poison", which fail permanently (and are dead-lettered).
type poisonSink struct{}

func (poisonSink) Write(_ context.Context, evs []sink.Event) []error {
	errs := make([]error, len(evs))
	for i, ev := range evs {
		if strings.HasPrefix(ev.ID, "poison") {
			errs[i] = sink.Permanent(errors.New("test: poison event"))
		}
	}
	return errs
}

// findChromium returns the path of a Chromium or Chrome binary, or "".
func findChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// artifactDir is where the browser test leaves its screenshot:
// $LEAFLINE_ARTIFACTS if set, else the test's temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("LEAFLINE_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestConsole_Browser drives the L1 console in headless Chromium against a
// running system (L1, a hub, two edges): the page loads without a console
// error, shows the sites and L1's streams, shows a dead-lettered event and
// a cut link within its refresh interval, and finds an event by id.
func TestConsole_Browser(t *testing.T) {
	chrome := findChromium()
	if chrome == "" {
		if os.Getenv("LEAFLINE_REQUIRE_CHROMIUM") == "1" {
			t.Fatal("no chromium binary on PATH and LEAFLINE_REQUIRE_CHROMIUM=1 (apt-get install -y chromium)")
		}
		t.Skip("no chromium binary on PATH (apt-get install -y chromium); set LEAFLINE_REQUIRE_CHROMIUM=1 to fail instead")
	}
	const refresh = 500 * time.Millisecond
	ls := testSystemWith(t, Options{Edges: 2, Configure: func(c *topology.Config) { c.DeadLetter.Enabled = true }}, func(site string) leafline.Options {
		if site == "l1" {
			return leafline.Options{L1: []l1.Option{l1.WithConsoleSampleEvery(refresh)}}
		}
		if strings.HasPrefix(site, "edge") {
			return leafline.Options{Edge: []edge.Option{edge.WithSink(poisonSink{})}}
		}
		return leafline.Options{}
	})
	l1js := jstest.ConnectURL(t, ls.App("l1").ClientURL())
	ids := publishN(t, l1js, "ok", 3)
	waitCompleted(t, ls, ids, "edge1", "edge2")

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1100, 760),
		chromedp.Flag("disable-dev-shm-usage", true))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// Subscribe before the first action so that no message is lost.
	var mu sync.Mutex
	var pageErrors []string
	lctx, lcancel := context.WithCancel(bctx)
	defer lcancel()
	messages := chromedp.Console(lctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleWarning {
				mu.Lock()
				pageErrors = append(pageErrors, fmt.Sprintf("%s: %s (%s)", m.Type, m.Text, m.URL))
				mu.Unlock()
			}
		}
	}()
	url := "http://" + ls.App("l1").OpsAddr() + "/console/"
	site := func(name, link string) chromedp.CSS {
		return chromedp.CSS(fmt.Sprintf(`tr.site[data-site=%q][data-link=%q]`, name, link))
	}
	// Each wait is bounded by a few refresh intervals plus the time the
	// system itself needs (the hub sees a cut link within seconds).
	wait := func(sel chromedp.CSS, within time.Duration) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			wctx, cancel := context.WithTimeout(ctx, within)
			defer cancel()
			if _, err := chromedp.WaitVisible(sel)(wctx, tg); err != nil {
				return fmt.Errorf("waiting for %s: %w", sel, err)
			}
			return nil
		})
	}
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	do("load", chromedp.Navigate(url), wait(site("edge1", "online"), 30*time.Second), wait(site("edge2", "online"), 30*time.Second),
		wait(`tr.site[data-site="edge1"] small.bytes span.down`, 5*time.Second),
		wait(`#streams tr.stream[data-stream="L1A"]`, 5*time.Second))

	poison := publishN(t, l1js, "poison", 1)[0]
	do("dead-lettered event shown", wait(chromedp.CSS(fmt.Sprintf(`#dead_lettered a.evlink[data-id=%q]`, poison)), 20*time.Second),
		wait(`tr.site[data-site="edge1"] td.dead.bad`, 10*time.Second))

	ls.Links["edge2"].Cut()
	do("cut link shown", wait(site("edge2", "offline"), 30*time.Second), wait(site("edge1", "online"), 15*time.Second))

	do("search", chromedp.SetValue(chromedp.CSS(`#search-id`), ids[1]), chromedp.Click(chromedp.CSS(`#search button`)),
		wait(`#event-result .event-record .status`, 5*time.Second))
	status, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`#event-result .event-record .status`)))
	if err != nil {
		t.Fatal(err)
	}
	if status != "complete" {
		t.Errorf("search for %q shows status %q, want complete", ids[1], status)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(artifactDir(t), "console.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)

	// On a phone-sized screen the page has no horizontal scroll.
	do("phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), wait(site("edge2", "offline"), 5*time.Second))
	fits, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth <= window.innerWidth + 1`))
	if err != nil {
		t.Fatal(err)
	}
	if !fits {
		t.Error("on a 390px-wide screen the page scrolls sideways")
	}

	mu.Lock()
	defer mu.Unlock()
	if len(pageErrors) > 0 {
		t.Errorf("the page logged errors:\n%s", strings.Join(pageErrors, "\n"))
	}
}

// TestLinkBeatSubject_OnePlace: the hub's link permission at L1 allows the
// subject its console beats go on.
func TestLinkBeatSubject_OnePlace(t *testing.T) {
	if a, b := topology.LinkBeatSubject("hub1"), console.LinkSubject("hub1"); a != b {
		t.Fatalf("topology allows %q, the console uses %q", a, b)
	}
}
