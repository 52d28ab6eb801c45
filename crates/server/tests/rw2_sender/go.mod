module strata/rw2sender

go 1.26.0

require github.com/prometheus/client_golang/exp v0.0.0-20261019101427-217707f26b14

require (
	github.com/klauspost/compress v1.20.1 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
