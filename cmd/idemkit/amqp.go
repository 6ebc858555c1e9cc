package main

import (
	"fmt"

	"github.com/idemkit/idemkit/replay"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// amqpConn dials --amqp-url, bounded by --timeout; the connection is closed when
// the command ends.
func (a *app) amqpConn() (*amqp091.Connection, error) {
	conn, err := amqp091.DialConfig(a.amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(a.timeout)})
	if err != nil {
		return nil, fmt.Errorf("the RabbitMQ broker at %s did not answer (check --amqp-url, its credentials, vhost and TLS): %w", redactURL(a.amqpURL), err)
	}
	a.closers = append(a.closers, func() { _ = conn.Close() })
	return conn, nil
}

// openQueue opens a RabbitMQ queue source; its total is the queue's length now.
func (a *app) openQueue(s *sourceFlags) (replay.Source, int64, error) {
	conn, err := a.amqpConn()
	if err != nil {
		return nil, 0, err
	}
	var opts []replay.RabbitOption
	if s.keyHeaderGiven() {
		opts = append(opts, replay.RabbitKeyHeader(s.keyHeader))
	}
	src, err := replay.OpenRabbitMQ(conn, s.queue, opts...)
	if err != nil {
		return nil, 0, err
	}
	a.closers = append(a.closers, func() { _ = src.Close() })
	return src, src.Total(), nil
}

// redactURL hides a URL's password.
func redactURL(u string) string {
	uri, err := amqp091.ParseURI(u)
	if err != nil {
		return "(an unparsable URL)"
	}
	if uri.Password != "" {
		uri.Password = "xxxxx"
	}
	return uri.String()
}
