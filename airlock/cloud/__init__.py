"""Cloud provider ports (CloudReader, CloudWriter) and the Alibaba Cloud adapter."""
