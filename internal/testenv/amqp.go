package testenv

import (
	"os"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// LocalAMQPURL is where a RabbitMQ on this machine listens by default.
const LocalAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

var sharedAMQP struct {
	once sync.Once
	url  string
	err  error
}

// AMQP returns the URL of a RabbitMQ broker for t: IDEMKIT_AMQP_URL when set, else
// the broker on this machine (127.0.0.1:5672) when it answers; else t is skipped
// (or fails under IDEMKIT_REQUIRE_SERVICES). Tests share the broker: each uses its
// own queue names and deletes them.
func AMQP(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("IDEMKIT_AMQP_URL"); u != "" {
		return u
	}
	sharedAMQP.once.Do(func() {
		sharedAMQP.err = amqpAnswers(LocalAMQPURL)
		if sharedAMQP.err == nil {
			sharedAMQP.url = LocalAMQPURL
		}
	})
	if sharedAMQP.err != nil {
		missing(t, "RabbitMQ broker (start rabbitmq-server or set IDEMKIT_AMQP_URL)", sharedAMQP.err)
	}
	return sharedAMQP.url
}

func amqpAnswers(url string) error {
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)})
	if err != nil {
		return err
	}
	return conn.Close()
}

// AMQPChannel opens a connection to url and a channel on it, both closed when the
// test ends: the plain channel a test publishes, gets or inspects queues with.
func AMQPChannel(t testing.TB, url string) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}
