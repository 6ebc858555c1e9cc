package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// TableAPI is what CreateTable needs of a DynamoDB client; *dynamodb.Client has it.
type TableAPI interface {
	CreateTable(ctx context.Context, in *ddb.CreateTableInput, opts ...func(*ddb.Options)) (*ddb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *ddb.DescribeTableInput, opts ...func(*ddb.Options)) (*ddb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *ddb.DescribeTimeToLiveInput, opts ...func(*ddb.Options)) (*ddb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *ddb.UpdateTimeToLiveInput, opts ...func(*ddb.Options)) (*ddb.UpdateTimeToLiveOutput, error)
}

var _ TableAPI = (*ddb.Client)(nil)

// TableSpec describes the records table CreateTable makes.
type TableSpec struct {
	// Name is the table's name. Default "idemkit" (DefaultTable).
	Name string
	// ReadCapacity and WriteCapacity, when both are set, make a table with
	// provisioned throughput. Default 0: on-demand (PAY_PER_REQUEST).
	ReadCapacity, WriteCapacity int64
	// Wait bounds how long CreateTable waits for a new table to become ACTIVE.
	// Default 2 minutes.
	Wait time.Duration
}

// ErrNoTTL says the server has no UpdateTimeToLive (dynalite and some other
// DynamoDB-protocol test servers): the table was made, but the server will not
// delete expired records. A Store reads expired records as absent all the
// same, so it works; only the space is not given back.
var ErrNoTTL = errors.New("dynamodb: the server does not support UpdateTimeToLive: expired records are not deleted (they read as absent)")

// CreateTable makes the records table a Store needs, or checks an existing
// one: partition key "pk" (a string), TTL on the "expires" attribute. It waits
// until a new table is ACTIVE, then enables TTL unless it is already enabled on
// "expires". It is safe to call at every start-up. An existing table whose key
// schema differs is an error that says so. On a server without
// UpdateTimeToLive it returns an error matching ErrNoTTL after making the table.
//
// The IAM permissions it needs on the table: dynamodb:CreateTable,
// dynamodb:DescribeTable, dynamodb:DescribeTimeToLive and
// dynamodb:UpdateTimeToLive.
func CreateTable(ctx context.Context, client TableAPI, spec TableSpec) error {
	if nilClient(client) {
		return errNilClient
	}
	if spec.Name == "" {
		spec.Name = DefaultTable
	}
	if spec.Wait == 0 {
		spec.Wait = 2 * time.Minute
	}
	switch {
	case !tableName.MatchString(spec.Name):
		return configError("TableSpec.Name %q: give 3 to 255 letters, digits, '_', '-' or '.'", spec.Name)
	case spec.ReadCapacity < 0 || spec.WriteCapacity < 0 || (spec.ReadCapacity == 0) != (spec.WriteCapacity == 0):
		return configError("TableSpec capacity %d read, %d write: give both (provisioned) or neither (on-demand)", spec.ReadCapacity, spec.WriteCapacity)
	case spec.Wait < 0:
		return configError("TableSpec.Wait %v: give a positive duration", spec.Wait)
	}
	name := aws.String(spec.Name)
	desc, err := client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: name})
	var notFound *types.ResourceNotFoundException
	switch {
	case errors.As(err, &notFound):
		in := &ddb.CreateTableInput{
			TableName:            name,
			AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS}},
			KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash}},
			BillingMode:          types.BillingModePayPerRequest,
		}
		if spec.ReadCapacity > 0 {
			in.BillingMode = types.BillingModeProvisioned
			in.ProvisionedThroughput = &types.ProvisionedThroughput{
				ReadCapacityUnits: aws.Int64(spec.ReadCapacity), WriteCapacityUnits: aws.Int64(spec.WriteCapacity)}
		}
		var inUse *types.ResourceInUseException
		if _, err := client.CreateTable(ctx, in); err != nil && !errors.As(err, &inUse) { // in use: made meanwhile
			return fmt.Errorf("dynamodb: create table %s: %w", spec.Name, err)
		}
		if err := ddb.NewTableExistsWaiter(client, func(o *ddb.TableExistsWaiterOptions) {
			o.MinDelay, o.MaxDelay = 100*time.Millisecond, 5*time.Second
		}).Wait(ctx, &ddb.DescribeTableInput{TableName: name}, spec.Wait); err != nil {
			return fmt.Errorf("dynamodb: table %s did not become ACTIVE: %w", spec.Name, err)
		}
	case err != nil:
		return fmt.Errorf("dynamodb: describe table %s: %w", spec.Name, err)
	default:
		if err := checkSchema(spec.Name, desc.Table); err != nil {
			return err
		}
	}
	ttl, err := client.DescribeTimeToLive(ctx, &ddb.DescribeTimeToLiveInput{TableName: name})
	if err != nil {
		return fmt.Errorf("dynamodb: describe TTL of table %s: %w", spec.Name, err)
	}
	if d := ttl.TimeToLiveDescription; d != nil && aws.ToString(d.AttributeName) == attrExpires &&
		(d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		return nil
	} else if d != nil && d.AttributeName != nil && aws.ToString(d.AttributeName) != attrExpires &&
		d.TimeToLiveStatus != types.TimeToLiveStatusDisabled {
		return fmt.Errorf("dynamodb: table %s has TTL on attribute %q; records expire by %q: disable it and call CreateTable again",
			spec.Name, aws.ToString(d.AttributeName), attrExpires)
	}
	_, err = client.UpdateTimeToLive(ctx, &ddb.UpdateTimeToLiveInput{TableName: name,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(attrExpires), Enabled: aws.Bool(true)}})
	var api smithy.APIError
	if errors.As(err, &api) && api.ErrorCode() == "UnknownOperationException" {
		return fmt.Errorf("%w (table %s)", ErrNoTTL, spec.Name)
	}
	if err != nil {
		return fmt.Errorf("dynamodb: enable TTL on %s.%s: %w", spec.Name, attrExpires, err)
	}
	return nil
}

// checkSchema says what is wrong with an existing table's key schema.
func checkSchema(name string, t *types.TableDescription) error {
	if t == nil {
		return fmt.Errorf("dynamodb: table %s: DescribeTable answered no description", name)
	}
	if len(t.KeySchema) != 1 || aws.ToString(t.KeySchema[0].AttributeName) != attrPK || t.KeySchema[0].KeyType != types.KeyTypeHash {
		return fmt.Errorf("dynamodb: table %s exists with another key schema: a records table has the partition key %q (a string) and no sort key",
			name, attrPK)
	}
	for _, a := range t.AttributeDefinitions {
		if aws.ToString(a.AttributeName) == attrPK && a.AttributeType != types.ScalarAttributeTypeS {
			return fmt.Errorf("dynamodb: table %s: its partition key %q is of type %s, not a string (S)", name, attrPK, a.AttributeType)
		}
	}
	return nil
}
