0
llama-3-8bcpuúdecode€ÿÿÿÿˆÿÿÿÿ˜