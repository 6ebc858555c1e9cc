package amqp_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idemamqp "github.com/idemkit/idemkit/adapters/amqp"
	"github.com/idemkit/idemkit/consumer"
	"github.com/idemkit/idemkit/internal/testenv"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A worker the broker refuses (a wrong password, a vhost that does not exist) ends
// Run with a *RefusedError that says what to fix, instead of reconnecting forever;
// it consumes nothing, and Check and Ready say the same. The broker names a
// missing vhost itself, so Run ends at once; a wrong password shows only as a
// login the broker drops, which a lost connection could also cause, so Run ends
// when the next dial is dropped too: exactly one reconnection.
func TestRefusedLoginEndsRun(t *testing.T) {
	url := testenv.AMQP(t)
	uri, err := amqp091.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "not-the-password-7f3a"
	wrongPassword, noVhost := uri, uri
	wrongPassword.Password = secret
	noVhost.Vhost = fmt.Sprintf("idemkit-no-such-vhost-%04x", rand.N(1<<16))
	for _, tc := range []struct {
		name       string
		url        string
		code       int
		fix        string
		reconnects int64
	}{
		{"wrong password", wrongPassword.String(), amqp091.AccessRefused, "password", 1},
		{"no such vhost", noVhost.String(), amqp091.NotAllowed, "create vhost \"" + noVhost.Vhost + "\"", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hooks := &counters{}
			store, _, _ := newStore(t, consumer.WithObserver(hooks))
			topo := topology(t, url, false)
			publish(t, url, topo.Queue, 5, 0)
			var runs atomic.Int32
			w, err := idemamqp.NewTypedWorker(store, tc.url, topo, decodeOrder,
				func(ctx context.Context, o order, d amqp091.Delivery) (string, error) { runs.Add(1); return "", nil })
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Ready(); !errors.Is(err, idemamqp.ErrNotConsuming) {
				t.Fatalf("Ready before Run: %v", err)
			}
			checkRefused(t, "Check", w.Check(context.Background()), tc.code, tc.fix, secret)

			r := start(t, w)
			select {
			case err := <-r.done:
				r.done <- err
				checkRefused(t, "Run", err, tc.code, tc.fix, secret)
			case <-time.After(time.Minute):
				t.Fatalf("Run still going a minute after the broker refused it (%d reconnects)", hooks.reconnects.Load())
			}
			ready := w.Ready()
			var refused *idemamqp.RefusedError
			if !errors.Is(ready, idemamqp.ErrNotConsuming) || !errors.As(ready, &refused) {
				t.Fatalf("Ready after the refusal: %v", ready)
			}
			if n := hooks.reconnects.Load(); n != tc.reconnects || runs.Load() != 0 || depth(t, url, topo.Queue) != 5 {
				t.Fatalf("%d reconnects, %d handler runs, %d of 5 messages left; want %d, 0, 5",
					n, runs.Load(), depth(t, url, topo.Queue), tc.reconnects)
			}
		})
	}
}

// A user that may log in but may not use the worker's queues (no configure
// permission): Run ends with a *RefusedError naming the permissions to give, and
// consumes nothing.
func TestRefusedPermissionsEndRun(t *testing.T) {
	url := testenv.AMQP(t)
	if !haveRabbitmqctl() {
		t.Skip("needs rabbitmqctl on the broker's machine")
	}
	uri, err := amqp091.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	user := fmt.Sprintf("idemkit-test-%04x", rand.N(1<<16))
	rabbitmqctl(t, "add_user", user, "pw-"+user)
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_user", user).Run() })
	rabbitmqctl(t, "set_permissions", "-p", uri.Vhost, user, "^$", "^$", "^$")
	restricted := uri
	restricted.Username, restricted.Password = user, "pw-"+user

	store, _, _ := newStore(t)
	topo := topology(t, url, false)
	publish(t, url, topo.Queue, 5, 0)
	var runs atomic.Int32
	w, err := idemamqp.NewTypedWorker(store, restricted.String(), topo, decodeOrder,
		func(ctx context.Context, o order, d amqp091.Delivery) (string, error) { runs.Add(1); return "", nil })
	if err != nil {
		t.Fatal(err)
	}
	checkRefused(t, "Check", w.Check(context.Background()), amqp091.AccessRefused, "permissions", "pw-"+user)
	r := start(t, w)
	select {
	case err := <-r.done:
		r.done <- err
		checkRefused(t, "Run", err, amqp091.AccessRefused, "permissions", "pw-"+user)
	case <-time.After(time.Minute):
		t.Fatal("Run still going a minute after the broker refused it")
	}
	if runs.Load() != 0 || depth(t, url, topo.Queue) != 5 {
		t.Fatalf("%d handler runs, %d of 5 messages left", runs.Load(), depth(t, url, topo.Queue))
	}
}

// checkRefused fails t unless err is a *RefusedError with code whose message
// names fix and does not show the password.
func checkRefused(t *testing.T, what string, err error, code int, fix, password string) {
	t.Helper()
	var refused *idemamqp.RefusedError
	var aerr *amqp091.Error
	if !errors.As(err, &refused) || refused.Code != code || !errors.As(err, &aerr) ||
		!strings.Contains(err.Error(), fix) || strings.Contains(err.Error(), password) {
		t.Fatalf("%s: %v; want a *RefusedError %d saying %q", what, err, code, fix)
	}
}

// The broker's connection is lost mid-run in ways a reconnection cures: the broker
// closes it (CONNECTION_FORCED), or it is reset on the way. The worker reconnects
// once, Run goes on, and every order is fulfilled exactly once: the handlers
// running at the loss are cancelled before their effect and run again after it.
func TestTransientLossesReconnect(t *testing.T) {
	url := testenv.AMQP(t)
	for _, tc := range []struct {
		name string
		lose func(t *testing.T, proxy *testenv.FaultProxy, name string, hooks *counters)
	}{
		{"closed by the broker", func(t *testing.T, _ *testenv.FaultProxy, name string, _ *counters) {
			if !haveRabbitmqctl() {
				t.Skip("needs rabbitmqctl on the broker's machine")
			}
			closeConnectionsNamed(t, name)
		}},
		{"reset on the way", func(t *testing.T, proxy *testenv.FaultProxy, _ string, _ *counters) { proxy.Reset() }},
		// A partition: nothing arrives either way, and nothing says so. The acks of
		// the handlers that finish meanwhile are lost in it; the worker hears no
		// heartbeat for three intervals, gives the session up, and the partition
		// heals as it does (before it redials). The broker requeues what the lost
		// session had not acked once it gives the connection up too: those run into
		// their completed records and are acked, none runs twice.
		{"blackholed on the way", func(t *testing.T, proxy *testenv.FaultProxy, _ string, _ *counters) { proxy.Blackhole() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, viaProxy := amqpProxy(t, url)
			hooks := &counters{onPause: proxy.Pass}
			store, book, _ := newStore(t, consumer.WithObserver(hooks))
			topo := topology(t, url, false)
			orders := publish(t, url, topo.Queue, 400, 0.2)
			// The handlers after the first 20 wait for the loss: it comes mid-run.
			var started atomic.Int32
			lost := make(chan struct{})
			slow := func(ctx context.Context, o order, d amqp091.Delivery) (string, error) {
				if started.Add(1) > 20 {
					select {
					case <-lost:
					case <-ctx.Done():
						return "", ctx.Err()
					}
				}
				return fulfil(book)(ctx, o, d)
			}
			name := fmt.Sprintf("idemkit-test-%04x", rand.N(1<<16))
			w, err := idemamqp.NewTypedWorker(store, viaProxy, topo, decodeOrder, slow, idemamqp.WithPrefetch(20),
				idemamqp.WithConcurrency(4), idemamqp.WithName(name), idemamqp.WithHeartbeat(time.Second),
				idemamqp.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			r := start(t, w)
			testenv.Eventually(t, 30*time.Second, "a few orders", func() bool { return book.Total(t) >= 20 })
			if err := w.Ready(); err != nil {
				t.Fatalf("Ready while consuming: %v", err)
			}
			tc.lose(t, proxy, name, hooks)
			close(lost)
			testenv.Eventually(t, 30*time.Second, "a reconnection", func() bool { return hooks.reconnects.Load() >= 1 })
			testenv.Eventually(t, 30*time.Second, "consuming again", func() bool { return w.Ready() == nil })
			testenv.Eventually(t, 60*time.Second, "every order fulfilled, the queues empty", func() bool {
				return book.Total(t) == len(orders) && depth(t, url, topo.Queue) == 0 && retryDepth(t, url, topo) == 0
			})
			select {
			case err := <-r.done:
				r.done <- err
				t.Fatalf("Run ended after a transient loss: %v", err)
			default:
			}
			r.stop()
			if err := w.Ready(); !errors.Is(err, idemamqp.ErrNotConsuming) {
				t.Fatalf("Ready after Run returned: %v", err)
			}
			if q, retries := depth(t, url, topo.Queue), retryDepth(t, url, topo); q != 0 || retries != 0 {
				t.Fatalf("after the stop: %d messages on the work queue, %d in the retry queues; want 0 and 0", q, retries)
			}
			checkExactlyOnce(t, book, orders)
			if n, back, dead := hooks.reconnects.Load(), hooks.resumes.Load(), depth(t, url, topo.DeadLetterQueue); n != 1 || back != 1 || dead != 0 {
				t.Fatalf("%d reconnects, %d resumes, %d dead letters; want 1, 1 and 0", n, back, dead)
			}
		})
	}
}

// A vhost whose connection limit is reached refuses the login with 530 NOT_ALLOWED,
// as a missing vhost does, but a reconnection cures it once a connection frees up:
// the worker keeps reconnecting, and consumes once the limit is lifted.
func TestConnectionLimitIsWaitedOut(t *testing.T) {
	url := testenv.AMQP(t)
	if !haveRabbitmqctl() {
		t.Skip("needs rabbitmqctl on the broker's machine")
	}
	uri, err := amqp091.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	uri.Vhost = fmt.Sprintf("idemkit-test-limit-%04x", rand.N(1<<16))
	rabbitmqctl(t, "add_vhost", uri.Vhost)
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_vhost", uri.Vhost).Run() })
	rabbitmqctl(t, "set_permissions", "-p", uri.Vhost, uri.Username, ".*", ".*", ".*")
	vurl := uri.String()
	hooks := &counters{}
	store, book, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, vurl, false)
	orders := publish(t, vurl, topo.Queue, 20, 0)
	rabbitmqctl(t, "set_vhost_limits", "-p", uri.Vhost, `{"max-connections": 0}`)

	w, err := idemamqp.NewTypedWorker(store, vurl, topo, decodeOrder, fulfil(book),
		idemamqp.WithReconnectBackoff(50*time.Millisecond, 200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	r := start(t, w)
	testenv.Eventually(t, 30*time.Second, "three refused logins", func() bool {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("Run ended over a connection limit: %v", err)
		default:
		}
		return hooks.reconnects.Load() >= 3
	})
	var aerr *amqp091.Error
	if err := w.Ready(); !errors.As(err, &aerr) || aerr.Code != amqp091.NotAllowed {
		t.Fatalf("Ready while the limit holds: %v; want the broker's 530", err)
	}
	rabbitmqctl(t, "clear_vhost_limits", "-p", uri.Vhost)
	testenv.Eventually(t, 30*time.Second, "every order fulfilled", func() bool { return book.Total(t) == len(orders) })
	r.stop()
	checkExactlyOnce(t, book, orders)
}

func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("rabbitmqctl", args...).CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// closeConnectionsNamed has the broker close the connections whose client named
// them name (WithName), as an operator or a broker shutting down would.
func closeConnectionsNamed(t *testing.T, name string) {
	t.Helper()
	out, err := exec.Command("rabbitmqctl", "list_connections", "-q", "--no-table-headers", "pid", "client_properties").Output()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v", err)
	}
	closed := 0
	for _, line := range strings.Split(string(out), "\n") {
		pid, props, ok := strings.Cut(line, "\t")
		if ok && strings.Contains(props, `{"connection_name","`+name+`"}`) {
			rabbitmqctl(t, "close_connection", pid, "idemkit test: forced close")
			closed++
		}
	}
	if closed == 0 {
		t.Fatalf("no connection named %q: %s", name, out)
	}
}

// A login that runs out of time (the broker's replies are slowed past the dial's
// bound) is what the client library also reports for a wrong password; it is not a
// refusal: the worker keeps reconnecting, and consumes once the broker answers in
// time.
func TestSlowLoginIsNotARefusal(t *testing.T) {
	url := testenv.AMQP(t)
	proxy, viaProxy := amqpProxy(t, url)
	hooks := &counters{}
	store, book, _ := newStore(t, consumer.WithObserver(hooks))
	topo := topology(t, url, false)
	orders := publish(t, url, topo.Queue, 5, 0)
	w, err := idemamqp.NewTypedWorker(store, viaProxy, topo, decodeOrder, fulfil(book),
		idemamqp.WithReconnectBackoff(10*time.Millisecond, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	proxy.SetDelay(2 * time.Second) // the login's third reply comes after the dial's 5s
	r := start(t, w)
	testenv.Eventually(t, time.Minute, "two logins out of time", func() bool {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("Run ended over slow logins: %v", err)
		default:
		}
		return hooks.reconnects.Load() >= 2
	})
	var refused *idemamqp.RefusedError
	if err := w.Ready(); err == nil || errors.As(err, &refused) {
		t.Fatalf("Ready while the logins run out of time: %v; want a reconnection, not a refusal", err)
	}
	proxy.SetDelay(0)
	testenv.Eventually(t, time.Minute, "every order fulfilled", func() bool { return book.Total(t) == len(orders) })
	r.stop()
	checkExactlyOnce(t, book, orders)
}
