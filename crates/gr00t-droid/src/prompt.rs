//! Prompt: instruction formalisation, chat layout, tokenisation and image-pad expansion.
