// Package telemetry holds what idemkit's metric plugins (contrib/idemprom and
// contrib/idemotel) share, whatever their metric library: label-keyed series that cost
// one map lookup per event, and the bounded, expiring table of Kafka commit lags.
package telemetry
