-- Output files are downloaded in chunks (`substring(bytes from … for …)`): stored
-- uncompressed, a chunk read touches only its own TOAST pages instead of decompressing the
-- whole file for every chunk. Applies to rows written from now on.
alter table task_output_files alter column bytes set storage external;
