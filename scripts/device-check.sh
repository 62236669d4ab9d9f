#!/usr/bin/env bash
echo "device-check: placeholder"
