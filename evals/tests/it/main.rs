mod basics;
