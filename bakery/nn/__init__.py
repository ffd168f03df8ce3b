"""Generic network blocks: descriptions, encodings, activations and their numpy reference,
the Slang a network compiles to, parameters on a device and the trainer. No module here
imports slangpy when it loads (specs, the reference and the generated source work
without a GPU stack); the device side (``parameters``) imports it where it runs."""
