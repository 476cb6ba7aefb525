"""The pretraining-records wing: sentence shards to TFRecords of NSP pairs with MLM masks.

instances (pairs, truncation) + masking -> schema (the Example layout, shared with the reader)
-> tfrecord (framing, CRC); writer turns a corpus into record files (Google's
create_pretraining_data), stage runs it over every shard; native is the optional C fast path."""
